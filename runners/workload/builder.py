"""Build a benchmark workload: load both tasks, mix them chat:code, shuffle, assign arrivals and SLOs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from runners.errors import ConfigError
from runners.workload.arrivals import arrival_times
from runners.workload.config import WorkloadConfig
from runners.workload.conversations import ConversationPair, LengthFilter, load_pairs
from runners.workload.requests import Request
from runners.workload.slo import TASKS, TaskSLO
from runners.workload.tokens import CHARACTERS_PER_TOKEN, ApproximateTokenCounter, TokenCounter, make_token_counter

#: Most conversations per task in a run's calibration sample (:attr:`Workload.calibration`).
CALIBRATION_SAMPLE = 1000
#: The random stream of calibration draws, apart from the run's own (numpy SeedSequence entropy
#: [seed, this]): drawing a calibration sample changes nothing the run sends.
CALIBRATION_STREAM = 0xCA11B
#: The random stream that draws which requests get a shared system prompt (workload.system_prompt).
SYSTEM_PROMPT_STREAM = 0x5157E
#: Content ids of shared system prompts (runners.workload.prefix segments): this plus the prompt's index.
SYSTEM_PROMPT_CONTENT = 1 << 44
#: The random stream of multi-turn sessions' think times (workload.multi_turn.think_time).
THINK_STREAM = 0x7417C


#: The reason a pair that does not fit the server's context is dropped (counted like the
#: dataset filters' reasons in each task's load report).
OVER_CONTEXT = "prompt + reply over the server's context"


@dataclass(frozen=True)
class ContextLimit:
    """The server's context: ``max_tokens`` (prompt + output, tokens; vLLM's ``max_model_len``)
    and ``prompt_overhead_tokens`` (tokens the server adds to each prompt's text: BOS, a chat
    template), with ``source`` saying where the limit was read."""

    max_tokens: int
    prompt_overhead_tokens: int = 0
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "prompt_overhead_tokens": self.prompt_overhead_tokens,
            "source": self.source,
        }


class ContextLengthFilter(LengthFilter):
    """The dataset filters, then the server's context: a pair is kept only if its prompt, with
    the tokens the server adds, plus its reply (the target output) fit in ``context_tokens``."""

    context_tokens: int = Field(ge=1)
    prompt_overhead_tokens: int = Field(default=0, ge=0)

    def rejects(self, input_tokens: int, output_tokens: int) -> str | None:
        reason = super().rejects(input_tokens, output_tokens)
        if reason is None and input_tokens + self.prompt_overhead_tokens + output_tokens > self.context_tokens:
            return OVER_CONTEXT
        return reason


@dataclass
class Workload:
    """The requests of a run, in arrival order, and what the loaders reported."""

    requests: list[Request]
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    synthetic: bool = True
    #: task -> output tokens of a calibration sample: up to CALIBRATION_SAMPLE conversations of
    #: the task's dataset (after the same filters) that this run does not send, drawn on a
    #: stream of their own. Empty for a task whose run sends every conversation (or more).
    calibration: dict[str, list[int]] = field(default_factory=dict)
    #: task -> (input, output) tokens of every request of the task, as :func:`build_workload`
    #: drew them (in another order than ``requests``: :meth:`mean_lengths` sums integers, which
    #: is exact in any order), for each task it sent; empty: read the requests
    lengths: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def mean_lengths(self, task: str) -> tuple[float, float] | None:
        """Mean (input, output) tokens of one task, or None if the task is absent."""
        if self.lengths:  # build_workload's: every task it sent has its entry
            if task not in self.lengths or not self.lengths[task][0].size:
                return None
            inputs, outputs = self.lengths[task]
            return float(np.mean(inputs)), float(np.mean(outputs))
        chosen = [r for r in self.requests if r.task == task]
        if not chosen:
            return None
        return (
            float(np.mean([r.input_tokens for r in chosen])),
            float(np.mean([r.target_output_tokens for r in chosen])),
        )


def _sample(pairs: Sequence[object], count: int, rng: np.random.Generator) -> tuple[list[int], bool]:
    """Indices of ``count`` pairs: without replacement when enough exist, else with replacement."""
    if count <= len(pairs):
        return rng.permutation(len(pairs))[:count].tolist(), False
    return rng.integers(len(pairs), size=count).tolist(), True


def _calibration_outputs(pairs: list[ConversationPair], sent: list[int], rng: np.random.Generator) -> list[int]:
    """Output tokens of up to CALIBRATION_SAMPLE of ``pairs`` whose indices are not in ``sent``."""
    held_out = np.setdiff1d(np.arange(len(pairs)), np.asarray(sent, dtype=np.int64), assume_unique=False)
    if held_out.size > CALIBRATION_SAMPLE:
        held_out = rng.choice(held_out, size=CALIBRATION_SAMPLE, replace=False)
    return [pairs[int(i)].output_tokens for i in held_out]


def _check_slos(counts: dict[str, int], slos: dict[str, TaskSLO]) -> None:
    missing = [task for task in counts if counts[task] and task not in slos]
    if missing:
        raise ConfigError("slo", f"no SLO for task(s) {missing}")


def _tag_slos(
    workload: Workload,
    counts: dict[str, int],
    slos_for: Callable[["Workload"], dict[str, TaskSLO]] | dict[str, TaskSLO],
) -> None:
    """Give every request its task's SLO, computed from the workload when ``slos_for`` is a callable."""
    slos = slos_for(workload) if callable(slos_for) else slos_for
    _check_slos(counts, slos)
    # in place: the requests are the builder's own until it returns (one object each, not two)
    tag = object.__setattr__
    for request in workload.requests:
        tag(request, "slo", slos[request.task])


def _made_up_text_ratio(counter: TokenCounter | None) -> float:
    """Characters per token of the made-up text (system prompts, trace prompts): a real
    tokenizer's own (runners.workload.traces.corpus_chars_per_token), else the approximation's 4."""
    from runners.workload.traces import corpus_chars_per_token

    if counter is None or isinstance(counter, ApproximateTokenCounter):
        return CHARACTERS_PER_TOKEN
    return corpus_chars_per_token(counter.count)


def _system_prompts(
    config: WorkloadConfig, counter: TokenCounter, count: int
) -> list[tuple[str, tuple[tuple[int, int], ...]]]:
    """For each of ``count`` draws (requests, or sessions), the text and segment of the shared
    system prompt it starts with, or ``("", ())`` for none: with probability
    ``config.system_prompt.share`` one of its ``prompts`` made-up texts (the same for the same prompt
    in every run; the counter's own characters per token), drawn uniformly on a stream of its own."""
    from runners.workload.traces import content_text

    shared = config.system_prompt
    assert shared is not None
    ratio = _made_up_text_ratio(counter)
    texts = [
        content_text(SYSTEM_PROMPT_CONTENT + index, shared.tokens, ratio) + "\n\n" for index in range(shared.prompts)
    ]
    rng = np.random.default_rng([config.seed, SYSTEM_PROMPT_STREAM])
    gets = rng.random(count) < shared.share
    which = rng.integers(shared.prompts, size=count)
    return [
        (texts[index], ((SYSTEM_PROMPT_CONTENT + index, shared.tokens),)) if chosen else ("", ())
        for chosen, index in zip(gets.tolist(), which.tolist())
    ]


def _add_system_prompts(
    requests: list[Request], config: WorkloadConfig, counter: TokenCounter, reports: dict[str, dict[str, Any]]
) -> None:
    """Put a shared system prompt (:func:`_system_prompts`) before the prompts of
    ``config.system_prompt.share`` of ``requests`` (in place: they are the builder's own): its
    text first, its tokens added to ``input_tokens``, and the segments that say so (the system
    prompt's content, then the request's own)."""
    from runners.workload.prefix import own_segments

    shared = config.system_prompt
    assert shared is not None
    tag = object.__setattr__
    given = 0
    for request, (text, prefix) in zip(requests, _system_prompts(config, counter, len(requests))):
        if not prefix:
            continue
        given += 1
        tag(request, "segments", (*prefix, *own_segments(request.request_id, request.input_tokens)))
        tag(request, "prompt", text + request.prompt)
        tag(request, "input_tokens", request.input_tokens + shared.tokens)
    reports["system_prompt"] = shared.model_dump() | {"requests": given}


def _trace_workload(
    config: WorkloadConfig,
    slos_for: Callable[["Workload"], dict[str, TaskSLO]] | dict[str, TaskSLO],
    context: ContextLimit | None,
    counter: TokenCounter | None = None,
) -> Workload:
    """The requests of ``config.trace``: its first ``config.requests`` records (time order), each
    with the record's lengths, task and segments, arriving at the trace's own offsets (divided by
    the speed-up). Records that do not fit the server's ``context`` are skipped first and counted
    as :data:`OVER_CONTEXT`; the dataset filters do not apply (the trace says what was sent).
    Prompts are made-up text (:func:`runners.workload.traces.prompt_text`) of 4 characters per
    token, or, with a real tokenizer (``counter``: the config's, or a server's), of that
    tokenizer's own ratio for the text, so the engine sees about the record's token count;
    equal segments are identical text, so a real engine's prefix cache sees the trace's sharing.
    The calibration sample is the output lengths of up to CALIBRATION_SAMPLE records past the
    ones sent, per task (drawn on the calibration stream)."""
    from runners.workload.prefix import own_segments
    from runners.workload.traces import load_trace, prompt_text

    assert config.trace is not None
    if counter is None and config.tokenizer:
        counter = make_token_counter(config.tokenizer)
    ratio = _made_up_text_ratio(counter)
    rejects = None
    if context is not None:
        limit, overhead = context.max_tokens, context.prompt_overhead_tokens

        def rejects(input_tokens: int, output_tokens: int) -> str | None:
            return OVER_CONTEXT if input_tokens + overhead + output_tokens > limit else None

    trace = load_trace(config.trace, config.requests, rejects)
    unset = TaskSLO.model_construct(e2e_s=float("inf"))  # replaced by _tag_slos below
    requests = []
    # a record's own text is keyed by the trace file's name too: two traces replayed on one server
    # share no text (and no cached prefix) through equal request ids
    source = Path(config.trace.path).name
    for position, (record, arrival) in enumerate(zip(trace.records, trace.arrivals_s)):
        request_id = f"req-{position:05d}"
        own = own_segments(f"{source}:{request_id}", record.input_tokens)[0][0]
        requests.append(
            Request(
                request_id,
                record.task,
                prompt_text(record.segments, own, record.input_tokens, ratio),
                record.input_tokens,
                record.output_tokens,
                arrival,
                unset,
                "trace",
                record.segments,
            )
        )
    counts = {task: sum(1 for r in requests if r.task == task) for task in TASKS}
    calibration_rng = np.random.default_rng([config.seed, CALIBRATION_STREAM])
    calibration: dict[str, list[int]] = {}
    lengths: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for task in TASKS:
        if not counts[task]:
            continue
        sent = [r for r in requests if r.task == task]
        lengths[task] = (
            np.fromiter((r.input_tokens for r in sent), np.int64, len(sent)),
            np.fromiter((r.target_output_tokens for r in sent), np.int64, len(sent)),
        )
        held = [record.output_tokens for record in trace.held_out if record.task == task]
        if len(held) > CALIBRATION_SAMPLE:
            held = [held[int(i)] for i in calibration_rng.choice(len(held), size=CALIBRATION_SAMPLE, replace=False)]
        calibration[task] = held
    report = trace.report()
    if context is not None:
        report["context"] = context.as_dict()
    workload = Workload(
        requests, {"trace": report}, synthetic=config.is_synthetic, calibration=calibration, lengths=lengths
    )
    _tag_slos(workload, counts, slos_for)
    return workload


def _filters(config: WorkloadConfig, context: ContextLimit | None) -> LengthFilter:
    """The dataset filters, and the server's context (with a system prompt's tokens) when known."""
    if context is None:
        return config.filters
    system_tokens = config.system_prompt.tokens if config.system_prompt is not None else 0
    return ContextLengthFilter(
        **config.filters.model_dump(),
        context_tokens=context.max_tokens,
        prompt_overhead_tokens=context.prompt_overhead_tokens + system_tokens,
    )


def _think_times(config: WorkloadConfig, count: int) -> list[float]:
    """``count`` think times (seconds) of ``config.multi_turn.think_time``, on their own stream."""
    assert config.multi_turn is not None
    think = config.multi_turn.think_time
    if think.distribution == "constant" or think.mean_s == 0:
        return [float(think.mean_s)] * count
    return np.random.default_rng([config.seed, THINK_STREAM]).exponential(think.mean_s, size=count).tolist()


def _session_workload(
    config: WorkloadConfig,
    slos_for: Callable[["Workload"], dict[str, TaskSLO]] | dict[str, TaskSLO],
    counter: TokenCounter,
    context: ContextLimit | None,
) -> Workload:
    """The turns of ``config.requests`` sessions (runners.workload.sessions), drawn per task by the
    ratio from the conversations whose first exchange passes the filters (the conversations a
    single-turn run draws from, in the same way), shuffled, first turns timed by the arrival
    process; later turns wait for the previous one (``arrival_s`` FOLLOWS, ``after``, ``think_s``).
    A shared system prompt is the session's: drawn per session, before every turn's prompt."""
    from runners.workload.requests import FOLLOWS
    from runners.workload.sessions import load_conversations, session_prompt, session_segments, turns_that_fit

    multi = config.multi_turn
    assert multi is not None
    counts = config.ratio.counts(config.requests)
    filters = _filters(config, context)
    limit, extra = multi.context_tokens, 0
    if config.system_prompt is not None:
        extra += config.system_prompt.tokens
    if context is not None:
        limit, extra = min(limit, context.max_tokens), extra + context.prompt_overhead_tokens
    rng = np.random.default_rng(config.seed)
    calibration_rng = np.random.default_rng([config.seed, CALIBRATION_STREAM])
    reports: dict[str, dict[str, Any]] = {}
    calibration: dict[str, list[int]] = {}
    chosen: list[tuple[str, int, Any]] = []
    for task_key, task in enumerate(TASKS):
        if not counts[task]:
            continue
        # one exchange past max_turns, to tell the sessions that had more (counted, not sent)
        conversations, report = load_conversations(getattr(config, task), task, counter, filters, multi.max_turns + 1)
        indices, oversampled = _sample(conversations, counts[task], rng)
        firsts = [ConversationPair("", "", c.tokens[0], c.tokens[1]) for c in conversations]
        calibration[task] = _calibration_outputs(firsts, indices, calibration_rng)
        reports[task] = report.as_dict() | {
            "sampled": counts[task],
            "oversampled": oversampled,
            "calibration_sample": len(calibration[task]),
        }
        chosen.extend((task, task_key, conversations[i]) for i in indices)
    order = rng.permutation(len(chosen)).tolist()
    arrivals = np.asarray(arrival_times(config.arrival, len(chosen), config.seed), dtype=float).tolist()
    sent = [turns_that_fit(chosen[i][2], multi.max_turns, limit, extra) for i in order]
    thinks = iter(_think_times(config, sum(sent) - len(sent)))
    prefixes: list[tuple[str, tuple[tuple[int, int], ...]]] = [("", ())] * len(order)
    if config.system_prompt is not None:  # a session's system prompt starts every turn
        prefixes = _system_prompts(config, counter, len(order))
        reports["system_prompt"] = config.system_prompt.model_dump() | {"sessions": sum(1 for _, p in prefixes if p)}
    kinds = {task: getattr(config, task).kind for task in TASKS}
    unset = TaskSLO.model_construct(e2e_s=float("inf"))  # replaced by _tag_slos below
    requests: list[Request] = []
    for position, (index, turns) in enumerate(zip(order, sent)):
        task, task_key, conversation = chosen[index]
        text, segments = prefixes[position]
        session, previous = f"s-{position:05d}", ""
        for turn in range(1, turns + 1):
            request_id = f"req-{position:05d}-{turn:03d}"
            requests.append(
                Request(
                    request_id,
                    task,
                    text + session_prompt(conversation, turn),
                    sum(length for _, length in segments) + conversation.prompt_tokens(turn),
                    conversation.reply_tokens(turn),
                    arrivals[position] if turn == 1 else FOLLOWS,
                    unset,
                    kinds[task],
                    session_segments(conversation, task_key, turn, segments),
                    session,
                    turn,
                    previous,
                    0.0 if turn == 1 else next(thinks),
                )
            )
            previous = request_id
    reports["sessions"] = _session_report(multi, [chosen[i][2] for i in order], sent, limit)
    lengths = {
        task: (
            np.fromiter((r.input_tokens for r in requests if r.task == task), np.int64),
            np.fromiter((r.target_output_tokens for r in requests if r.task == task), np.int64),
        )
        for task in TASKS
        if counts[task]
    }
    workload = Workload(requests, reports, synthetic=config.is_synthetic, calibration=calibration, lengths=lengths)
    _tag_slos(workload, {task: sum(1 for r in requests if r.task == task) for task in TASKS}, slos_for)
    return workload


def _session_report(multi: Any, conversations: list[Any], sent: list[int], limit: int) -> dict[str, Any]:
    """What the sessions send and what they leave out: turns per session, turns cut by the context
    limit (``limit`` tokens) and beyond ``max_turns``, the think time."""
    possible = [min(multi.max_turns, conversation.turns) for conversation in conversations]
    return {
        "sessions": len(sent),
        "turns": sum(sent),
        "turns_per_session_mean": sum(sent) / len(sent) if sent else None,
        "max_turns": multi.max_turns,
        "context_tokens": limit,
        "sessions_cut_at_context": sum(1 for can, did in zip(possible, sent) if did < can),
        "turns_cut_at_context": sum(can - did for can, did in zip(possible, sent)),
        "sessions_over_max_turns": sum(1 for c in conversations if c.turns > multi.max_turns),
        "think_time": multi.think_time.model_dump(),
    }


def build_workload(
    config: WorkloadConfig,
    slos_for: Callable[["Workload"], dict[str, TaskSLO]] | dict[str, TaskSLO],
    counter: TokenCounter | None = None,
    context: ContextLimit | None = None,
) -> Workload:
    """Load, mix (ratio chat:code, shuffled with the seed), time and tag every request.

    ``slos_for`` is a mapping task -> SLO, or a callable that computes it from the loaded
    (not yet tagged) workload, which the "auto" preset needs. ``counter``: the token counter
    (default: ``config.tokenizer``'s, or the approximation); ``context``: the server's limit,
    pairs that do not fit it are dropped before sampling and counted as :data:`OVER_CONTEXT`.
    With ``config.trace`` set the trace is the workload instead (:func:`_trace_workload`).
    """
    if config.trace is not None:
        return _trace_workload(config, slos_for, context, counter)
    if counter is None:
        counter = make_token_counter(config.tokenizer)
    if config.multi_turn is not None:
        return _session_workload(config, slos_for, counter, context)
    counts = config.ratio.counts(config.requests)
    filters = _filters(config, context)
    rng = np.random.default_rng(config.seed)
    calibration_rng = np.random.default_rng([config.seed, CALIBRATION_STREAM])
    chosen_tasks: list[str] = []
    chosen: list[ConversationPair] = []
    reports: dict[str, dict[str, Any]] = {}
    calibration: dict[str, list[int]] = {}
    lengths: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for task in TASKS:
        if counts[task] == 0:
            continue
        pairs, report = load_pairs(getattr(config, task), task, counter, filters)
        indices, oversampled = _sample(pairs, counts[task], rng)
        drawn = np.asarray(indices, dtype=np.int64)
        lengths[task] = (
            np.fromiter((pair.input_tokens for pair in pairs), np.int64, len(pairs))[drawn],
            np.fromiter((pair.output_tokens for pair in pairs), np.int64, len(pairs))[drawn],
        )
        calibration[task] = _calibration_outputs(pairs, indices, calibration_rng)
        reports[task] = report.as_dict() | {
            "sampled": counts[task],
            "oversampled": oversampled,
            "calibration_sample": len(calibration[task]),
        }
        if context is not None:
            reports[task]["context"] = context.as_dict()
        chosen_tasks.extend([task] * len(indices))
        chosen.extend([pairs[i] for i in indices])
    order = rng.permutation(len(chosen))
    times = arrival_times(config.arrival, len(chosen), config.seed)
    kinds = {task: getattr(config, task).kind for task in TASKS}
    arrivals = np.asarray(times, dtype=float).tolist()  # the same floats as float(times[i])
    slos = None if callable(slos_for) else slos_for
    if slos is not None:
        _check_slos(counts, slos)
    # a placeholder (not user input) until the callable has seen the workload, replaced below
    unset = TaskSLO.model_construct(e2e_s=float("inf"))
    slo_of = {task: unset if slos is None else slos[task] for task in TASKS if counts[task]}
    requests = []
    for position, index in enumerate(order.tolist()):
        task, pair = chosen_tasks[index], chosen[index]
        requests.append(
            Request(
                f"req-{position:05d}",
                task,
                pair.prompt,
                pair.input_tokens,
                pair.output_tokens,
                arrivals[position],
                slo_of[task],
                kinds[task],
            )
        )
    if config.system_prompt is not None:
        _add_system_prompts(requests, config, counter, reports)
    workload = Workload(requests, reports, synthetic=config.is_synthetic, calibration=calibration, lengths=lengths)
    if slos is None:
        slos = slos_for(workload)  # type: ignore[operator]
        _check_slos(counts, slos)
        # tag in place: the requests are this function's own until it returns (one object each
        # instead of two: building a million requests twice is seconds, and garbage-collector work)
        tag = object.__setattr__
        for request in requests:
            tag(request, "slo", slos[request.task])
    return workload
