"""The request a benchmark sends: task, prompt, token counts, arrival time and SLO."""

from __future__ import annotations

from dataclasses import dataclass

from runners.workload.slo import TaskSLO


@dataclass(frozen=True, slots=True)
class Request:
    """One benchmark request.

    ``input_tokens`` and ``target_output_tokens`` are token counts; ``arrival_s`` is seconds
    from the run's start. The target output is sent as ``max_tokens`` with ``ignore_eos`` so
    every scheduler and engine serves exactly the same work.
    """

    request_id: str
    task: str
    prompt: str
    input_tokens: int
    target_output_tokens: int
    arrival_s: float
    slo: TaskSLO
    source: str = ""
    #: What the prompt is made of, for prefix caching (runners.workload.prefix): (content id,
    #: tokens) pieces in order, summing to ``input_tokens``; two requests whose pieces agree up to
    #: a point share exactly those tokens there (a session's earlier turns, a shared system
    #: prompt, a trace's ``hash_ids``). Empty: the whole prompt is the request's own.
    segments: tuple[tuple[int, int], ...] = ()

    @property
    def total_tokens(self) -> int:
        """Prompt plus target output, in tokens: the KV footprint when the request finishes."""
        return self.input_tokens + self.target_output_tokens
