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
comes from :class:`~runners.engines.latency_model.LatencyModel`. With ``run_to_completion``
the engine behaves like a static-batching server (FasterTransformer; Baton's baseline):
new requests join only while the current batch is still in its first prefill, and finished
requests keep their KV blocks until the whole batch has finished (the memory sawtooth).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from runners.engines.latency_model import LatencyModel
from runners.engines.profile import EngineProfile, resolve_profile
from runners.engines.kv_cache import GPUBudget, ModelShape, kv_capacity_tokens
from runners.errors import ConfigError
from runners.input_model import InputModel

#: Largest KV capacity a config may give, tokens: a thousand times a 141 GB GPU's cache for a 7B
#: model (about a million tokens); beyond it a number is a typo, not an engine.
MAX_KV_CAPACITY_TOKENS = 1_000_000_000


class SimulatorConfig(InputModel):
    """The simulated engine: a profile (preset or file) plus optional overrides."""

    kind: Literal["sim"] = "sim"
    preset: str = "qwen2.5-7b-2xv100-vllm"
    profile: str | None = Field(default=None, description="profile file (JSON/YAML); overrides preset")
    instances: int = Field(default=1, gt=0, le=64)
    kv_capacity_tokens: int | None = Field(default=None, gt=0, le=MAX_KV_CAPACITY_TOKENS,
                                           description="override KV capacity, tokens")
    model: ModelShape | None = Field(default=None, description="compute KV capacity from this shape")
    gpu: GPUBudget | None = None
    block_size: int | None = Field(default=None, gt=0, le=4096, description="tokens per KV block")
    max_num_seqs: int | None = Field(default=None, gt=0, le=65_536, description="most requests running at once")
    max_num_batched_tokens: int | None = Field(default=None, gt=0, le=10_000_000, description="tokens per step")
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    run_to_completion: bool = Field(default=False, description="hold KV until the batch ends (static server)")
    pace: float | None = Field(
        default=None, ge=0.001, le=1_000_000.0,
        description="simulated seconds per wall-clock second (1 = real time), so a run can be watched live; "
                    "unset = as fast as possible. Only delays the driver: every measured value is the same. "
                    "0.001 (a simulated second every 17 minutes) to 1,000,000",
    )

    def resolve(self) -> "ResolvedSimulator":
        """Merge the profile and the overrides; ConfigError on an impossible combination."""
        profile = resolve_profile(self.preset, self.profile)
        block_size = self.block_size or profile.block_size
        if self.kv_capacity_tokens is not None:
            capacity = self.kv_capacity_tokens
        elif self.model is not None or self.gpu is not None:
            model = self.model or profile.model
            gpu = self.gpu or profile.gpu
            if model is None or gpu is None:
                raise ConfigError("engine.model", "give both engine.model and engine.gpu to compute KV capacity")
            capacity = kv_capacity_tokens(model, gpu, block_size)
            if capacity <= 0:
                raise ConfigError(
                    "engine.gpu", f"model weights ({model.weight_bytes / 1e9:.1f} GB) leave no room for KV cache"
                )
        else:
            capacity = profile.capacity_tokens()
        if capacity < block_size:
            if self.kv_capacity_tokens is not None:
                source = "engine.kv_capacity_tokens"
            elif self.model is not None or self.gpu is not None:
                source = "engine.gpu"
            else:
                source = f"engine.profile: {self.profile}: kv_capacity_tokens" if self.profile else "engine.preset"
            raise ConfigError(source, f"a KV cache of {capacity} tokens is less than one block ({block_size} tokens)")
        if capacity > MAX_KV_CAPACITY_TOKENS:
            source = "engine.gpu" if self.model is not None or self.gpu is not None else "engine.profile"
            raise ConfigError(source, f"the model and GPU give a KV cache of {capacity:,} tokens; expected at most "
                              f"{MAX_KV_CAPACITY_TOKENS:,}")
        return ResolvedSimulator(
            profile=profile,
            latency=profile.latency_model(),
            kv_capacity_tokens=(capacity // block_size) * block_size,
            block_size=block_size,
            max_num_seqs=self.max_num_seqs or profile.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens or profile.max_num_batched_tokens,
        )


@dataclass(frozen=True)
class ResolvedSimulator:
    profile: EngineProfile
    latency: LatencyModel
    kv_capacity_tokens: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int


class SimulationError(RuntimeError):
    """The simulated engine reached a state it cannot leave (for example a request larger than the cache)."""


@dataclass(slots=True, eq=False)
class Sequence:
    """One dispatch of a request inside the engine. Token counts; times in seconds."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    priority: int
    order: int
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    token_times: list[float] = field(default_factory=list)
    cancelled: bool = False


@dataclass(slots=True)
class StepOutcome:
    """What one finished step produced. ``duration_s``: the step's time from the latency model
    (seconds); ``decode_requests``: requests that generated a decode token in it (0: a step of
    prefill only), so a step with ``decode_requests`` > 0 took ``duration_s`` per output token of
    each of them - the engine's own per-step decode latency."""

    first_tokens: list[Sequence]
    finished: list[Sequence]
    tokens: int
    duration_s: float = 0.0
    decode_requests: int = 0


class SimulatedInstance:
    """One simulated engine instance; all times are seconds of virtual time."""

    def __init__(
        self,
        instance_id: int,
        latency: LatencyModel,
        kv_capacity_tokens: int,
        block_size: int = 16,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192,
        scheduling_policy: str = "fcfs",
        run_to_completion: bool = False,
    ) -> None:
        self.instance_id = instance_id
        self.latency = latency
        self.block_size = block_size
        self.total_blocks = kv_capacity_tokens // block_size
        self.free_blocks = self.total_blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.priority_mode = scheduling_policy == "priority"
        self.run_to_completion = run_to_completion
        self.running: list[Sequence] = []
        self.holding: list[Sequence] = []
        self._waiting_fifo: deque[Sequence] = deque()
        self._waiting_heap: list[tuple[int, int, Sequence]] = []
        self._scheduled: list[Sequence] = []
        self._chunks: list[int] = []
        self._step_duration_s = 0.0
        self._step_decodes = 0
        self._order = 0
        self.sequences: dict[str, Sequence] = {}
        self.busy = False
        self.preemptions_total = 0
        self.tokens_total = 0
        self.steps_total = 0

    @property
    def kv_capacity_tokens(self) -> int:
        return self.total_blocks * self.block_size

    # -- requests in -------------------------------------------------------------------------
    def add(self, request_id: str, prompt_tokens: int, max_tokens: int, priority: int = 0) -> Sequence:
        """Queue a request: ``prompt_tokens`` to prefill, then up to ``max_tokens`` to generate."""
        if prompt_tokens + max_tokens > self.kv_capacity_tokens:
            raise SimulationError(
                f"request {request_id} needs {prompt_tokens + max_tokens} KV tokens but instance "
                f"{self.instance_id} holds only {self.kv_capacity_tokens}"
            )
        seq = Sequence(request_id, int(prompt_tokens), int(max_tokens), int(priority), self._order)
        self._order += 1
        self.sequences[request_id] = seq
        self._push_waiting(seq, front=False)
        return seq

    def cancel(self, request_id: str) -> bool:
        """Abort a queued or running request: free its blocks and drop its progress."""
        seq = self.sequences.pop(request_id, None)
        if seq is None:
            return False
        seq.cancelled = True
        self.free_blocks += seq.blocks
        seq.blocks = 0
        if seq in self.running:
            self.running.remove(seq)
        elif self.priority_mode:
            self._waiting_heap = [entry for entry in self._waiting_heap if entry[2] is not seq]
            heapq.heapify(self._waiting_heap)
        elif seq in self._waiting_fifo:
            self._waiting_fifo.remove(seq)
        return True

    def _push_waiting(self, seq: Sequence, front: bool) -> None:
        if self.priority_mode:
            heapq.heappush(self._waiting_heap, (seq.priority, seq.order, seq))
        elif front:
            self._waiting_fifo.appendleft(seq)
        else:
            self._waiting_fifo.append(seq)

    def _peek_waiting(self) -> Sequence | None:
        if self.priority_mode:
            return self._waiting_heap[0][2] if self._waiting_heap else None
        return self._waiting_fifo[0] if self._waiting_fifo else None

    def _pop_waiting(self) -> Sequence:
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

    # -- one step ----------------------------------------------------------------------------
    def _preempt_victim(self) -> Sequence:
        if self.priority_mode:
            return max(self.running, key=lambda s: (s.priority, s.order))
        return self.running[-1]

    def start_step(self) -> float | None:
        """Choose this step's work; return its duration in seconds, or None if there is none."""
        budget = self.max_num_batched_tokens
        block_size = self.block_size
        scheduled: list[Sequence] = []
        chunks: list[int] = []
        preempted = False
        decode_requests = decode_context = 0
        running = self.running
        index = 0
        while index < len(running) and budget > 0:
            seq = running[index]
            computed = seq.computed
            chunk = seq.prompt_tokens + seq.generated - computed
            if chunk == 1 and seq.generated and computed < seq.blocks * block_size:
                # the common case: a decode token that fits in the sequence's last block
                scheduled.append(seq)
                chunks.append(1)
                budget -= 1
                decode_requests += 1
                decode_context += computed + 1
                index += 1
                continue
            if chunk > budget:
                chunk = budget
            need = -(-(computed + chunk) // block_size) - seq.blocks
            if need > self.free_blocks:
                preempted = True
                preempted_self = False
                while need > self.free_blocks:
                    victim = self._preempt_victim()
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
                seq.blocks += need
                self.free_blocks -= need
            scheduled.append(seq)
            chunks.append(chunk)
            budget -= chunk
            if chunk == 1 and seq.generated and computed == seq.prompt_tokens + seq.generated - 1:
                decode_requests += 1
                decode_context += computed + 1
            index += 1
        if not preempted:
            self._admit_waiting(scheduled, chunks, budget)
        if not scheduled:
            return None
        if preempted:  # victims may have been dropped from the plan: count afresh
            decode_requests = decode_context = 0
            for seq, chunk in zip(scheduled, chunks):
                if chunk == 1 and seq.generated and seq.computed == seq.prompt_tokens + seq.generated - 1:
                    decode_requests += 1
                    decode_context += seq.computed + 1
        prefill_requests = len(scheduled) - decode_requests
        prefill_tokens = sum(chunks) - decode_requests
        self._scheduled = scheduled
        self._chunks = chunks
        self.busy = True
        self._step_decodes = decode_requests
        self._step_duration_s = self.latency.step_time(prefill_requests, prefill_tokens, decode_requests, decode_context)
        return self._step_duration_s

    def _admit_waiting(self, scheduled: list[Sequence], chunks: list[int], budget: int) -> None:
        if self.run_to_completion and any(seq.generated > 0 for seq in self.running):
            return  # the current batch is past its prefill: no one joins until it ends
        if self.run_to_completion and self.holding:
            return
        block_size = self.block_size
        while budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self._peek_waiting()
            if seq is None:
                break
            chunk = seq.prompt_tokens + seq.generated - seq.computed
            if chunk > budget:
                chunk = budget
            need = -(-(seq.computed + chunk) // block_size) - seq.blocks
            if need > self.free_blocks:
                if not self.running and need > self.total_blocks:
                    raise SimulationError(f"request {seq.request_id} cannot fit in an empty KV cache")
                break
            self._pop_waiting()
            seq.blocks += need
            self.free_blocks -= need
            self.running.append(seq)
            scheduled.append(seq)
            chunks.append(chunk)
            budget -= chunk

    def _preempt(self, seq: Sequence) -> None:
        """Recompute-style preemption: drop the KV blocks; prompt and output so far are re-prefilled."""
        self.free_blocks += seq.blocks
        seq.blocks = 0
        seq.computed = 0
        seq.preemptions += 1
        self.preemptions_total += 1
        self._push_waiting(seq, front=True)

    def finish_step(self, now: float) -> StepOutcome:
        """Apply the step started last, ending at ``now`` (seconds): tokens, completions, frees."""
        first_tokens: list[Sequence] = []
        finished: list[Sequence] = []
        tokens = 0
        for seq, chunk in zip(self._scheduled, self._chunks):
            if seq.cancelled:
                continue
            computed = seq.computed + chunk
            seq.computed = computed
            generated = seq.generated
            if computed == seq.prompt_tokens + generated:
                generated += 1
                seq.generated = generated
                seq.token_times.append(now)
                tokens += 1
                if generated == 1:
                    first_tokens.append(seq)
                if generated >= seq.max_tokens:
                    finished.append(seq)
        if finished:
            for seq in finished:
                self.sequences.pop(seq.request_id, None)
            done = set(map(id, finished))
            self.running = [seq for seq in self.running if id(seq) not in done]
            if self.run_to_completion:
                self.holding.extend(finished)
            else:
                for seq in finished:
                    self.free_blocks += seq.blocks
                    seq.blocks = 0
        if self.run_to_completion and self.holding and not self.running:
            for seq in self.holding:
                self.free_blocks += seq.blocks
                seq.blocks = 0
            self.holding = []
        self._scheduled, self._chunks = [], []
        self.busy = False
        self.tokens_total += tokens
        self.steps_total += 1
        return StepOutcome(first_tokens, finished, tokens, self._step_duration_s, self._step_decodes)
