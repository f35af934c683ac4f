"""A discrete-event, iteration-level model of a vLLM-like continuous-batching engine.

Each call to :meth:`SimulatedInstance.start_step` plays one engine iteration the way vLLM's
V1 scheduler does, then :meth:`finish_step` applies it when the step's time has passed:

1. running requests first, in admission order: each gets its next prefill chunk or one decode
   token, within ``max_num_batched_tokens`` per step (chunked prefill); a request that needs a
   new KV block when none is free preempts the last-admitted running request (FCFS) or the
   lowest-priority one (priority policy), which frees its blocks and is recomputed later
   (prompt and tokens so far re-prefilled), and is counted;
2. then, only if nothing was preempted, waiting requests in FCFS or priority order while fewer
   than ``max_num_seqs`` run and blocks and token budget remain.

A request's KV footprint is its computed tokens rounded up to ``block_size``. The step time
comes from :class:`~runners.engines.latency_model.LatencyModel`, plus the step model's
``idle_start_s`` for a step that starts when the engine held no request since its last step. With ``run_to_completion``
the engine behaves like a static-batching server (FasterTransformer; Baton's baseline):
new requests join only while the current batch is still in its first prefill, and finished
requests keep their KV blocks until the whole batch has finished (the memory sawtooth).

A client of a real server also waits outside the steps (HTTP, tokenisation, streaming): with a
profile that carries a :class:`~runners.engines.latency_model.ServingOverhead`, the driver hands a
dispatched request to the instance only when that delay has passed (``serving_overhead: false``
turns it off).

Where this model knowingly differs from vLLM V1 (measured cost: bench/results/sim_fidelity.md):

- prefix caching is modelled on the prompt's segments (Request.segments), not its token ids: two
  prompts share exactly the blocks their segments say they share (the real tokenizer may merge
  tokens across a segment boundary, so a real engine can share a block fewer); generated tokens
  are reused only by the request itself (a preempted request, a slice sent again), since another
  request's prompt never contains them; a chunk computed after tokens already in its request's KV
  (a cached prefix, earlier chunks) costs the step model's ``per_prefill_context_token_s`` per
  chunk token x such token (0 in profiles measured without the profiler's prefix loads: a cached
  prefix then costs no attention time);
- a step's time comes from the profile's step model, a function of what the step computes; the
  real step varies around it (the fit's out-of-fold error is in the profile's ``fit``);
- the serving front end's delay is all put before the engine and depends on load only through
  the requests the engine runs when a request arrives (see ``ServingOverhead``); on a machine
  where front end and engine share cores the front end's work on each arriving request also takes
  engine time: with a profile whose overhead has ``busy_request_engine_s``, each request
  dispatched while the engine runs requests adds that to the engine's next step
  (:meth:`SimulatedInstance.charge_front_end`); the per-token streaming work is inside the
  measured decode steps;
- no EOS, stop strings or speculative decoding: a request generates exactly its ``max_tokens``
  (the real runs ask for exactly that many with ``min_tokens``/``ignore_eos``);
- no swap preemption and no pipeline of scheduled-ahead steps (async scheduling): a step starts
  when the previous one ends and sees every request that arrived before it started;
- requests that arrive in the same instant join the waiting queue in dispatch order (the real
  front end may reorder them by a few microseconds).
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from runners.engines.latency_model import LatencyModel
from runners.workload.prefix import block_keys


class SimulationError(RuntimeError):
    """The simulated engine reached a state it cannot leave (for example a request larger than the cache)."""


@dataclass(slots=True, eq=False)
class SimSequence:
    """One dispatch of a request inside the engine. Token counts; times in seconds.

    While a request decodes steadily (one token each step) the engine does not touch it step
    by step: ``c``, ``g`` and ``b`` then hold its state as of step ``lazy_from`` and the
    properties :attr:`computed`, :attr:`generated`, :attr:`blocks` and :attr:`token_times`
    add the steps since. ``runs`` holds the steps that produced its tokens as flat
    ``[start, end)`` pairs of indices into the engine's ``step_times`` (the last pair is open,
    ending at the engine's step count, while it decodes steadily)."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    priority: int
    order: int
    engine: "SimulatedInstance"
    c: int = 0  # computed tokens (as of step lazy_from when lazy)
    g: int = 0  # generated tokens (as of step lazy_from when lazy)
    b: int = 0  # KV blocks held (explicit sequences only)
    preemptions: int = 0
    runs: list[int] = field(default_factory=list)
    cancelled: bool = False
    lazy_from: int = -1  # the engine's step count when it began decoding steadily; -1: not
    rank: int = 0  # admission order into the running set (running order)
    segments: tuple[tuple[int, int], ...] = ()  # the prompt's content pieces (Request.segments)
    keys: list[int] | None = None  # chained keys of its segments' full blocks (prefix caching)
    held: int = 0  # leading keys it references in the prefix cache (blocks it shares)
    returns: bool = False  # a slice of the request: it will be sent again with its output so far
    cached: int = 0  # prompt tokens found in the prefix cache when first admitted (vLLM's num_cached_tokens)

    @property
    def computed(self) -> int:
        """Tokens in the KV cache (prompt and output so far)."""
        return self.c if self.lazy_from < 0 else self.c + self.engine.steps_total - self.lazy_from

    @property
    def generated(self) -> int:
        """Output tokens generated so far in this dispatch."""
        return self.g if self.lazy_from < 0 else self.g + self.engine.steps_total - self.lazy_from

    @property
    def blocks(self) -> int:
        """KV blocks held (a steadily decoding request holds its step's block once the step started)."""
        if self.lazy_from < 0:
            return self.b
        engine = self.engine
        return -(-(self.computed + (1 if engine.busy else 0)) // engine.block_size)

    @property
    def token_times(self) -> list[float]:
        """When each output token of this dispatch was produced, seconds."""
        steps = self.engine.step_times
        runs = self.runs
        times: list[float] = []
        last = len(runs) - 2
        for position in range(0, len(runs), 2):
            end = self.engine.steps_total if position == last and self.lazy_from >= 0 else runs[position + 1]
            times.extend(steps[runs[position] : end])
        return times


@dataclass(slots=True)
class StepOutcome:
    """What one finished step produced. ``duration_s``: the step's time from the latency model
    (seconds); ``decode_requests``: requests that generated a decode token in it (0: a step of
    prefill only), so a step with ``decode_requests`` > 0 took ``duration_s`` per output token of
    each of them - the engine's own per-step decode latency."""

    first_tokens: list[SimSequence]
    finished: list[SimSequence]
    tokens: int
    duration_s: float = 0.0
    decode_requests: int = 0


@dataclass(slots=True)
class _StepPlan:
    """One step's work before it starts: the requests scheduled and their chunks (tokens, in the
    same order), and what the step model is given: the prefill requests and their tokens, the
    decode requests (one token each), the sum of their contexts (tokens) and, when the step model
    charges for it, the sum over prefill chunks of chunk x tokens already in that request's KV
    (token^2; else 0)."""

    scheduled: list[SimSequence]
    chunks: list[int]
    prefill_requests: int
    prefill_tokens: int
    decode_requests: int
    decode_context: int
    prefill_context: int = 0


class SimulatedInstance:
    """One simulated engine instance; all times are seconds of virtual time.

    Steady decoders (requests whose next step is one decode token) are kept in aggregate:
    their count, the sum of their context lengths, how many reach a new KV block at each step
    (by ``computed`` modulo ``block_size``) and the step at which each finishes. A step in which
    every running request fits the token budget and the free blocks (no preemption) is then
    planned and applied without visiting them one by one; any other step materialises every
    request and plays the iteration exactly as described in the module docstring. Both give the
    same steps, step times and tokens."""

    def __init__(
        self,
        *,
        instance_id: int,
        latency: LatencyModel,
        kv_capacity_tokens: int,
        block_size: int = 16,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        scheduling_policy: str = "fcfs",
        run_to_completion: bool = False,
        prefix_caching: bool = True,
    ) -> None:
        self.instance_id = instance_id
        self.prefix_caching = prefix_caching
        #: the prefix cache (see _PrefixCache in the module doc): shared key -> requests using it
        #: (0: cached in a free block, evictable), the free-block queue in eviction order when it
        #: holds cached blocks (empty: every free block is plain), cached free keys -> generation,
        #: and each request's own cached run of blocks
        self._refs: dict[int, int] = {}
        self._queue: deque[Any] = deque()  # int: plain blocks; (key, generation); [request id, blocks]
        self._evictable: dict[int, int] = {}
        self._own: dict[str, list[Any]] = {}
        self._generation = 0
        #: prompt tokens looked up in the prefix cache at admission, and those found (tokens)
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.latency = latency
        self.block_size = block_size
        self.total_blocks = kv_capacity_tokens // block_size
        self.free_blocks = self.total_blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.priority_mode = scheduling_policy == "priority"
        self.run_to_completion = run_to_completion
        #: running requests in admission order (a dict used as an ordered set)
        self.running: dict[SimSequence, None] = {}
        #: the running requests that are not steady decoders, in admission order
        self._explicit: dict[SimSequence, None] = {}
        self.holding: list[SimSequence] = []
        self._waiting_fifo: deque[SimSequence] = deque()
        self._waiting_heap: list[tuple[int, int, SimSequence]] = []
        self._scheduled: list[SimSequence] = []
        self._chunks: list[int] = []
        self._fast = False
        self._step_duration_s = 0.0
        self._step_decodes = 0
        self._order = 0
        self._rank = 0
        # steady decoders in aggregate: count, sum of (computed - lazy_from), count per
        # (computed - lazy_from) mod block_size, and who finishes at which step count
        self._lazy_count = 0
        self._lazy_key_sum = 0
        self._lazy_phase = [0] * block_size
        self._finish_at: dict[int, list[SimSequence]] = {}
        #: end time (seconds) of every finished step, by step index
        self.step_times: array[float] = array("d")
        self.sequences: dict[str, SimSequence] = {}
        self.busy = False
        #: no request in the engine since its last step ended (or ever): the next step is an idle start
        self.idle = True
        self._idle_start_s = latency.idle_start_s
        #: whether steps charge prefill chunks for the KV they attend over (then plans count it)
        self._prefill_context = latency.prefill_context_s > 0
        self._decode_step_time = _decode_step_time(latency)
        #: engine seconds the front end has taken since the last step began (added to the next step)
        self._front_end_s = 0.0
        self.preemptions_total = 0
        self.tokens_total = 0
        self.steps_total = 0

    @property
    def step_duration_s(self) -> float:
        """Seconds the step started last takes (what :meth:`start_step` returned)."""
        return self._step_duration_s

    @property
    def kv_capacity_tokens(self) -> int:
        return self.total_blocks * self.block_size

    # -- requests in -------------------------------------------------------------------------
    def add(
        self,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int,
        priority: int = 0,
        segments: tuple[tuple[int, int], ...] = (),
        returns: bool = False,
    ) -> SimSequence:
        """Queue a request: ``prompt_tokens`` to prefill, then up to ``max_tokens`` to generate.
        ``segments``: what the prompt is made of (Request.segments; empty: its own content);
        ``returns``: a slice, sent again later with its output so far (its own blocks are worth
        keeping in the prefix cache when it finishes)."""
        if prompt_tokens + max_tokens > self.kv_capacity_tokens:
            raise SimulationError(
                f"request {request_id} needs {prompt_tokens + max_tokens} KV tokens but instance "
                f"{self.instance_id} holds only {self.kv_capacity_tokens}"
            )
        seq = SimSequence(request_id, int(prompt_tokens), int(max_tokens), int(priority), self._order, self)
        if segments:
            seq.segments = segments
        seq.returns = returns
        self._order += 1
        self.sequences[request_id] = seq
        self._push_waiting(seq, front=False)
        return seq

    def charge_front_end(self, seconds: float) -> None:
        """The serving front end took ``seconds`` of the engine's time (its work on an arriving
        request, on cores it shares with the engine): the next step lasts that much longer."""
        self._front_end_s += seconds

    def cancel(self, request_id: str) -> bool:
        """Abort a queued or running request: free its blocks and drop its progress."""
        seq = self.sequences.pop(request_id, None)
        if seq is None:
            return False
        if seq.lazy_from >= 0:
            self._finish_at[seq.lazy_from + seq.max_tokens - seq.g].remove(seq)
            self._unlazify(seq)
            if self.busy:
                seq.b = -(-(seq.c + 1) // self.block_size)  # its block for the step under way
        seq.cancelled = True
        self._release(seq)
        if seq in self.running:
            del self.running[seq]
            self._explicit.pop(seq, None)
        elif self.priority_mode:
            self._waiting_heap = [entry for entry in self._waiting_heap if entry[2] is not seq]
            heapq.heapify(self._waiting_heap)
        elif seq in self._waiting_fifo:
            self._waiting_fifo.remove(seq)
        return True

    def _push_waiting(self, seq: SimSequence, front: bool) -> None:
        if self.priority_mode:
            heapq.heappush(self._waiting_heap, (seq.priority, seq.order, seq))
        elif front:
            self._waiting_fifo.appendleft(seq)
        else:
            self._waiting_fifo.append(seq)

    def _peek_waiting(self) -> SimSequence | None:
        if self.priority_mode:
            return self._waiting_heap[0][2] if self._waiting_heap else None
        return self._waiting_fifo[0] if self._waiting_fifo else None

    def _pop_waiting(self) -> SimSequence:
        if self.priority_mode:
            return heapq.heappop(self._waiting_heap)[2]
        return self._waiting_fifo.popleft()

    @property
    def waiting_count(self) -> int:
        return len(self._waiting_heap) if self.priority_mode else len(self._waiting_fifo)

    def has_work(self) -> bool:
        return bool(self.running) or self.waiting_count > 0

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    # -- the prefix cache ----------------------------------------------------------------------
    def _cached_prefix(self, seq: SimSequence) -> tuple[int, int]:
        """(blocks of ``seq``'s prompt found in the prefix cache, how many of them sit in free
        blocks) for a request about to be admitted; at most (its tokens - 1) // block_size, as
        vLLM always computes at least one token."""
        limit = (seq.prompt_tokens + seq.g - 1) // self.block_size
        if seq.segments:
            if seq.keys is None:
                seq.keys = block_keys(seq.segments, self.block_size, seq.prompt_tokens)
            refs = self._refs
            hits = reused = 0
            for key in seq.keys[:limit]:
                count = refs.get(key)
                if count is None:
                    break
                hits += 1
                if count == 0:
                    reused += 1
            return hits, reused
        run = self._own.get(seq.request_id)
        hits = min(run[1], limit) if run is not None else 0
        return hits, hits

    def _take_prefix(self, seq: SimSequence, hits: int) -> None:
        """Admit ``seq`` with its first ``hits`` blocks from the cache: shared blocks gain a user,
        cached free blocks leave the free pool, and the hit is counted (tokens)."""
        block_size = self.block_size
        self.prefix_queries += seq.prompt_tokens + seq.g
        if seq.segments:
            seq.held = hits
            refs, evictable = self._refs, self._evictable
            reused = 0
            for key in (seq.keys or [])[:hits]:
                count = refs[key]
                if count == 0:
                    del evictable[key]  # its entry in the queue is now stale
                    reused += 1
                refs[key] = count + 1
        else:
            run = self._own.pop(seq.request_id, None)
            reused = hits
            if run is not None:  # the blocks not reused are plain free blocks where they lie
                run[0], run[1] = None, run[1] - hits
        if hits:
            self.free_blocks -= reused
            self.prefix_hits += hits * block_size
            seq.c = hits * block_size
            seq.b = hits
            if not seq.preemptions:  # as vLLM, the first admission's count: a re-admission does not change it
                seq.cached = hits * block_size

    def _cache_computed(self, seq: SimSequence) -> None:
        """Put the full blocks of ``seq``'s prompt computed so far into the prefix cache (keys
        already cached elsewhere are computed again here, and stay this request's own)."""
        keys, refs = seq.keys or [], self._refs
        full = min(seq.c, seq.prompt_tokens) // self.block_size
        for index in range(seq.held, min(full, len(keys))):
            key = keys[index]
            if key in refs:
                break
            refs[key] = 1
            seq.held = index + 1

    def _release(self, seq: SimSequence, own: bool = True) -> None:
        """Free ``seq``'s blocks, last block first (vLLM's order, so a prompt's tail is evicted
        before its head). With prefix caching its full blocks stay cached in the free pool until
        evicted: shared blocks when their last user leaves, a request's own computed blocks as
        one run it alone can reuse (after a preemption or a cancel, or a slice sent again). A
        request that finished for good (``own`` False) frees its own blocks as plain ones: vLLM
        keeps them cached too, but no later prompt can hit them, and a free block takes the same
        place in the eviction order whether it is cached or not, so nothing else changes."""
        blocks = seq.b
        seq.b = 0
        if not self.prefix_caching or not blocks:
            self._free_plain(blocks)
            return
        queue = self._queue
        if seq.segments:
            held = seq.held
            seq.held = 0
            self._free_plain(blocks - held)
            refs, evictable = self._refs, self._evictable
            for key in reversed((seq.keys or [])[:held]):
                count = refs[key] - 1
                refs[key] = count
                if count == 0:
                    if not queue:
                        queue.append(self.free_blocks)
                    self._generation += 1
                    evictable[key] = self._generation
                    queue.append((key, self._generation))
                    self.free_blocks += 1
            if len(queue) > 2 * self.free_blocks + 64:
                self._compact()
            return
        full = min(seq.c // self.block_size, blocks) if own else 0
        self._free_plain(blocks - full)
        if full:
            if not queue:
                queue.append(self.free_blocks)
            run: list[Any] = [seq.request_id, full]
            queue.append(run)
            self._own[seq.request_id] = run
            self.free_blocks += full

    def _compact(self) -> None:
        """Drop the queue's stale entries (cached blocks reused since they were freed) and merge
        neighbouring plain counts, so the queue stays at most about twice the free blocks long."""
        compact: deque[Any] = deque()
        for item in self._queue:
            if type(item) is tuple:
                if self._evictable.get(item[0]) != item[1]:
                    continue
            elif type(item) is list:
                if item[1] == 0:
                    continue
                if item[0] is None:
                    item = item[1]
            if type(item) is int and compact and type(compact[-1]) is int:
                compact[-1] += item
            else:
                compact.append(item)
        self._queue = compact

    def _free_plain(self, blocks: int) -> None:
        """``blocks`` uncached blocks join the free pool (at the queue's end when it is kept)."""
        self.free_blocks += blocks
        if self._queue and blocks:
            self._queue.append(blocks)

    def _consume(self, blocks: int) -> None:
        """``blocks`` were just taken from the free pool (``free_blocks`` already lowered): take
        them from the queue's head, evicting the cached blocks there (least recently freed first)."""
        queue = self._queue
        while blocks > 0 and queue:
            item: Any = queue[0]
            if type(item) is int:
                if item > blocks:
                    queue[0] = item - blocks
                    return
                blocks -= item
                queue.popleft()
            elif type(item) is tuple:
                queue.popleft()
                key, generation = item
                if self._evictable.get(key) == generation:  # else reused since: not a free block
                    del self._evictable[key]
                    del self._refs[key]
                    blocks -= 1
            else:
                take = min(item[1], blocks)
                item[1] -= take  # evicted from its end: the run's first blocks stay reusable
                blocks -= take
                if item[1] == 0:
                    queue.popleft()
                    owner = item[0]
                    if owner is not None and self._own.get(owner) is item:
                        del self._own[owner]
        if len(queue) == 1 and type(queue[0]) is int:
            queue.clear()  # nothing cached is free: the free blocks are all plain again

    # -- steady decoders ---------------------------------------------------------------------
    def _lazify(self, seq: SimSequence) -> None:
        """Keep ``seq`` (its next step is one decode token) in aggregate from now on."""
        step = self.steps_total
        key = seq.c - step
        seq.lazy_from = step
        self._lazy_count += 1
        self._lazy_key_sum += key
        self._lazy_phase[key % self.block_size] += 1
        finish = step + seq.max_tokens - seq.g
        waiting = self._finish_at.get(finish)
        if waiting is None:
            self._finish_at[finish] = [seq]
        else:
            waiting.append(seq)
        runs = seq.runs
        if not runs or runs[-1] != step:
            runs.append(step)
            runs.append(step)

    def _unlazify(self, seq: SimSequence) -> None:
        """Give ``seq`` its explicit state as of now (not busy); the caller drops it from ``_finish_at``."""
        step = self.steps_total
        since = step - seq.lazy_from
        key = seq.c - seq.lazy_from
        self._lazy_count -= 1
        self._lazy_key_sum -= key
        self._lazy_phase[key % self.block_size] -= 1
        seq.c += since
        seq.g += since
        seq.b = -(-seq.c // self.block_size)
        seq.runs[-1] = step
        seq.lazy_from = -1

    def _unlazify_all(self) -> None:
        for group in self._finish_at.values():
            for seq in group:
                self._unlazify(seq)
        self._finish_at.clear()
        self._explicit = dict.fromkeys(self.running)

    # -- one step ----------------------------------------------------------------------------
    def start_step(self) -> float | None:
        """Choose this step's work; return its duration in seconds, or None if there is none."""
        if self._lazy_count and not self._explicit and not (self._waiting_heap or self._waiting_fifo):
            duration = self._start_decode_step()
            if duration is not None:
                return duration
        plan = self._plan_whole_batch()
        if plan is None:
            self._unlazify_all()
            self._fast = False
            plan = self._plan_each()
        elif plan.scheduled or plan.decode_requests:
            self._fast = True
        if not plan.scheduled and not plan.decode_requests:
            return None
        return self._begin_step(plan)

    def _start_decode_step(self) -> float | None:
        """Start a step of steady decoders alone (nothing explicit runs, nothing waits) when the
        token budget and the free blocks suffice: what :meth:`_plan_whole_batch` and
        :meth:`_begin_step` do for such a step, without building its plan; its duration, seconds.
        None (and nothing changed) when they do not suffice."""
        lazy = self._lazy_count
        step = self.steps_total
        need = self._lazy_phase[-step % self.block_size]
        if lazy > self.max_num_batched_tokens or need > self.free_blocks:
            return None
        self.free_blocks -= need
        if self._queue:
            self._consume(need)
        self._fast = True
        self.busy = True
        self._step_decodes = lazy
        duration = self._decode_step_time(lazy, self._lazy_key_sum + lazy * (step + 1))
        if self.idle:
            self.idle = False
            duration += self._idle_start_s
        if self._front_end_s:
            duration += self._front_end_s
            self._front_end_s = 0.0
        self._step_duration_s = duration
        return duration

    def silent_step(self) -> bool:
        """Whether the step under way computes steady decoders alone and finishes none of them:
        it gives each one token and changes nothing a policy sees (:meth:`finish_silent_step`)."""
        return self._fast and not self._scheduled and self.steps_total + 1 not in self._finish_at

    def finish_silent_step(self, now: float) -> int:
        """:meth:`finish_step` for a step that :meth:`silent_step` says is silent, ending at ``now``
        (seconds), without building its outcome; returns the tokens it generated (one per steady
        decoder; the step's duration and decoders are those :meth:`finish_step` would give)."""
        self.step_times.append(now)
        self.steps_total += 1
        self.busy = False
        tokens = self._lazy_count
        self.tokens_total += tokens
        return tokens

    def _plan_whole_batch(self) -> _StepPlan | None:
        """The step's plan when every running request gets its whole chunk (token budget and free
        blocks suffice, so no one is preempted), steady decoders in aggregate, then the waiting
        requests admitted; None (and nothing changed) when they do not fit."""
        block_size = self.block_size
        step = self.steps_total
        lazy = self._lazy_count
        demand = lazy
        need_blocks = self._lazy_phase[-step % block_size] if lazy else 0
        plan: list[tuple[SimSequence, int, int]] = []
        for seq in self._explicit:
            chunk = seq.prompt_tokens + seq.g - seq.c
            need = -(-(seq.c + chunk) // block_size) - seq.b
            plan.append((seq, chunk, need))
            demand += chunk
            if need > 0:
                need_blocks += need
        if demand > self.max_num_batched_tokens or need_blocks > self.free_blocks:
            return None
        scheduled: list[SimSequence] = []
        chunks: list[int] = []
        for seq, chunk, need in plan:
            if need > 0:
                seq.b += need
            scheduled.append(seq)
            chunks.append(chunk)
        self.free_blocks -= need_blocks
        if self._queue:
            self._consume(need_blocks)
        self._admit_waiting(scheduled, chunks, self.max_num_batched_tokens - demand)
        return _StepPlan(
            scheduled=scheduled,
            chunks=chunks,
            prefill_requests=len(scheduled),
            prefill_tokens=sum(chunks),
            decode_requests=lazy,
            decode_context=self._lazy_key_sum + lazy * (step + 1),
            prefill_context=sum(seq.c * chunk for seq, chunk in zip(scheduled, chunks)) if self._prefill_context else 0,
        )

    def _begin_step(self, plan: _StepPlan) -> float:
        """Start the planned step: the engine is busy until :meth:`finish_step`; its duration, seconds
        (the step model's time, plus the idle start for the first step after an idle spell)."""
        self._scheduled = plan.scheduled
        self._chunks = plan.chunks
        self.busy = True
        self._step_decodes = plan.decode_requests
        if plan.prefill_context:
            self._step_duration_s = self.latency.step_time(
                plan.prefill_requests,
                plan.prefill_tokens,
                plan.decode_requests,
                plan.decode_context,
                plan.prefill_context,
            )
        else:
            self._step_duration_s = self.latency.step_time(
                plan.prefill_requests, plan.prefill_tokens, plan.decode_requests, plan.decode_context
            )
        if self.idle:
            self.idle = False
            self._step_duration_s += self._idle_start_s
        if self._front_end_s:
            self._step_duration_s += self._front_end_s
            self._front_end_s = 0.0
        return self._step_duration_s

    def _plan_each(self) -> _StepPlan:
        """Plan a step request by request (every request explicit): the running ones first,
        preempting on a block shortage, then waiting ones if no one was preempted."""
        budget = self.max_num_batched_tokens
        block_size = self.block_size
        scheduled: list[SimSequence] = []
        chunks: list[int] = []
        preempted = False
        decode_requests = decode_context = 0
        running = list(self.running)
        index = 0
        while index < len(running) and budget > 0:
            seq = running[index]
            computed = seq.c
            chunk = seq.prompt_tokens + seq.g - computed
            if chunk > budget:
                chunk = budget
            need = -(-(computed + chunk) // block_size) - seq.b
            if need > self.free_blocks:
                preempted = True
                preempted_self = False
                while need > self.free_blocks:
                    if self.priority_mode:
                        victim = max(running, key=lambda s: (s.priority, s.order))
                    else:
                        victim = running[-1]
                    victim_index = running.index(victim)
                    del running[victim_index]
                    for position, planned in enumerate(scheduled):
                        if planned is victim:
                            del scheduled[position]
                            budget += chunks.pop(position)
                            break
                    if victim_index < index:
                        index -= 1
                    self._preempt(victim)
                    if victim is seq:
                        preempted_self = True
                        break
                if preempted_self:
                    continue  # running[index] is now the next request
            if need > 0:
                seq.b += need
                self.free_blocks -= need
                if self._queue:
                    self._consume(need)
            scheduled.append(seq)
            chunks.append(chunk)
            budget -= chunk
            if chunk == 1 and seq.g and computed == seq.prompt_tokens + seq.g - 1:
                decode_requests += 1
                decode_context += computed + 1
            index += 1
        self.running = dict.fromkeys(running)
        self._explicit = dict.fromkeys(running)
        if not preempted:
            self._admit_waiting(scheduled, chunks, budget)
        else:  # victims may have been dropped from the plan: count afresh
            decode_requests = decode_context = 0
            for seq, chunk in zip(scheduled, chunks):
                if chunk == 1 and seq.g and seq.c == seq.prompt_tokens + seq.g - 1:
                    decode_requests += 1
                    decode_context += seq.c + 1
        prefill_context = 0
        if self._prefill_context:  # the decodes' seq.c x 1 taken out again
            prefill_context = sum(seq.c * chunk for seq, chunk in zip(scheduled, chunks)) - (
                decode_context - decode_requests
            )
        return _StepPlan(
            scheduled=scheduled,
            chunks=chunks,
            prefill_requests=len(scheduled) - decode_requests,
            prefill_tokens=sum(chunks) - decode_requests,
            decode_requests=decode_requests,
            decode_context=decode_context,
            prefill_context=prefill_context,
        )

    def _admit_waiting(self, scheduled: list[SimSequence], chunks: list[int], budget: int) -> None:
        if self.run_to_completion and (self._lazy_count or any(seq.g > 0 for seq in self._explicit)):
            return  # the current batch is past its prefill: no one joins until it ends
        if self.run_to_completion and self.holding:
            return
        block_size = self.block_size
        running = self.running
        explicit = self._explicit
        while budget > 0 and len(running) < self.max_num_seqs:
            seq = self._peek_waiting()
            if seq is None:
                break
            hits = reused = 0
            if self.prefix_caching and seq.c == 0:
                hits, reused = self._cached_prefix(seq)
            computed = hits * block_size
            chunk = seq.prompt_tokens + seq.g - computed
            if chunk > budget:
                chunk = budget
            need = -(-(computed + chunk) // block_size) - hits
            if need + reused > self.free_blocks:
                if not running and need > self.total_blocks:
                    raise SimulationError(f"request {seq.request_id} cannot fit in an empty KV cache")
                break
            self._pop_waiting()
            if self.prefix_caching and seq.c == 0:
                self._take_prefix(seq, hits)
            seq.b += need
            self.free_blocks -= need
            if self._queue:
                self._consume(need)
            seq.rank = self._rank
            self._rank += 1
            running[seq] = None
            explicit[seq] = None
            scheduled.append(seq)
            chunks.append(chunk)
            budget -= chunk

    def _preempt(self, seq: SimSequence) -> None:
        """Recompute-style preemption: drop the KV blocks (their full blocks stay in the prefix
        cache until evicted); prompt and output so far are re-prefilled, less what is still cached."""
        self._release(seq)
        seq.c = 0
        seq.preemptions += 1
        self.preemptions_total += 1
        self._push_waiting(seq, front=True)

    def finish_step(self, now: float) -> StepOutcome:
        """Apply the step started last, ending at ``now`` (seconds): tokens, completions, frees."""
        first_tokens: list[SimSequence] = []
        finished: list[SimSequence] = []
        tokens = 0
        step = self.steps_total
        after = step + 1
        self.step_times.append(now)
        for seq, chunk in zip(self._scheduled, self._chunks):
            if seq.cancelled:
                continue
            computed = seq.c + chunk
            seq.c = computed
            if seq.keys is not None and seq.held < len(seq.keys):
                self._cache_computed(seq)
            generated = seq.g
            if computed == seq.prompt_tokens + generated:
                generated += 1
                seq.g = generated
                runs = seq.runs
                if runs and runs[-1] == step:
                    runs[-1] = after
                else:
                    runs.append(step)
                    runs.append(after)
                tokens += 1
                if generated == 1:
                    first_tokens.append(seq)
                if generated >= seq.max_tokens:
                    finished.append(seq)
        if self._fast:
            tokens += self._lazy_count
            done = self._finish_at.pop(after, None)
            if done:
                block_size = self.block_size
                phase = self._lazy_phase
                for seq in done:
                    since = after - seq.lazy_from
                    key = seq.c - seq.lazy_from
                    self._lazy_count -= 1
                    self._lazy_key_sum -= key
                    phase[key % block_size] -= 1
                    seq.c += since
                    seq.g += since
                    seq.b = -(-seq.c // block_size)
                    seq.runs[-1] = after
                    seq.lazy_from = -1
                finished.extend(done)
                if len(finished) > 1:
                    finished.sort(key=_rank_of)
        self.steps_total = after
        if finished:
            running = self.running
            explicit = self._explicit
            sequences = self.sequences
            for seq in finished:
                sequences.pop(seq.request_id, None)
                del running[seq]
                explicit.pop(seq, None)
            if self.run_to_completion:
                self.holding.extend(finished)
            else:
                for seq in finished:
                    self._release(seq, own=seq.returns)
        if self.run_to_completion and self.holding and not self.running:
            for seq in self.holding:
                self._release(seq, own=seq.returns)
            self.holding = []
        if self._explicit:
            steady = [seq for seq in self._explicit if seq.g and seq.c == seq.prompt_tokens + seq.g - 1]
            for seq in steady:
                del self._explicit[seq]
                self._lazify(seq)
        self._scheduled, self._chunks = [], []
        self.busy = False
        if not self.running and not self.waiting_count:
            self.idle = True
        self.tokens_total += tokens
        return StepOutcome(first_tokens, finished, tokens, self._step_duration_s, self._step_decodes)


def _rank_of(seq: SimSequence) -> int:
    return seq.rank


def _decode_step_time(latency: LatencyModel) -> Callable[[int, int], float]:
    """``latency.step_time(0, 0, decode_requests, decode_context)`` as a function of the last two
    (seconds), bit for bit: for a linear step model the same terms summed in the same order as
    :meth:`~runners.engines.latency_model.LinearStepModel.step_time` (its ``sum`` over the
    features; the prefill-token, idle-start and prefill-context terms are 0.0 here and adding 0.0 changes no
    sum), without building the feature row for each of a run's millions of steps."""
    step = latency.step
    if step is None:
        return partial(latency.step_time, 0, 0)
    fixed, per_request, per_context, per_cpu = (
        step.fixed_s,
        step.per_decode_request_s,
        step.per_context_token_s,
        step.per_request_cpu_s,
    )

    def linear_time(decode_requests: int, decode_context: int) -> float:
        if not decode_requests:
            return 0.0
        return fixed + per_request * decode_requests + per_context * decode_context + per_cpu * decode_requests

    return linear_time
