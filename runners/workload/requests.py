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

    @property
    def total_tokens(self) -> int:
        """Prompt plus target output, in tokens: the KV footprint when the request finishes."""
        return self.input_tokens + self.target_output_tokens
