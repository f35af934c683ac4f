"""The request a benchmark sends: task, prompt, token counts, arrival time and SLO."""

from __future__ import annotations

import math
from dataclasses import dataclass

from runners.workload.slo import TaskSLO

#: The ``arrival_s`` of a session's later turn before it is ready: it arrives when the previous turn
#: has ended and the user has thought (:attr:`Request.after`, :attr:`Request.think_s`).
FOLLOWS = math.inf


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
    #: A multi-turn session's id ("" for a request that is not part of one: runners.workload.sessions).
    session: str = ""
    #: The turn's index in its session, from 1 (0: not a session's turn).
    turn: int = 0
    #: The request id of the session's previous turn ("" for a first turn). Such a turn is sent only
    #: when that one has ended: its ``arrival_s`` is :data:`FOLLOWS` until the previous turn's last
    #: token, then that time plus ``think_s`` (runners.store.recording releases it).
    after: str = ""
    #: Seconds the user thinks between the previous turn's reply and this turn (0 for a first turn).
    think_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt plus target output, in tokens: the KV footprint when the request finishes."""
        return self.input_tokens + self.target_output_tokens
