"""Service-level objectives per task, and the presets (paper, custom, auto).

Every limit is in seconds. A request meets its SLO iff every limit set for its task holds;
an unset limit (None) is not checked. TPOT is not defined for one-token outputs, so a TPOT
limit is treated as met when a request produced a single token.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from runners.input_model import InputModel

TASKS: tuple[str, ...] = ("chat", "code")


class TaskSLO(InputModel):
    """Latency limits for one task, in seconds (finite). At least one limit must be set."""

    model_config = ConfigDict(frozen=True)

    ttft_s: float | None = Field(default=None, gt=0, description="time to first token limit, seconds")
    tpot_s: float | None = Field(default=None, gt=0, description="time per output token limit, seconds")
    e2e_s: float | None = Field(default=None, gt=0, description="end-to-end latency limit, seconds")

    @model_validator(mode="after")
    def _at_least_one(self) -> "TaskSLO":
        if self.ttft_s is None and self.tpot_s is None and self.e2e_s is None:
            raise ValueError("set at least one of ttft_s, tpot_s, e2e_s (seconds, > 0)")
        return self

    def is_met(self, ttft_s: float, tpot_s: float | None, e2e_s: float) -> bool:
        """True iff every set limit holds for these measured latencies (seconds)."""
        if self.ttft_s is not None and not ttft_s <= self.ttft_s:
            return False
        if self.tpot_s is not None and tpot_s is not None and not tpot_s <= self.tpot_s:
            return False
        if self.e2e_s is not None and not e2e_s <= self.e2e_s:
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT <= {self.ttft_s:g} s")
        if self.tpot_s is not None:
            parts.append(f"TPOT <= {self.tpot_s * 1000:g} ms")
        if self.e2e_s is not None:
            parts.append(f"E2E <= {self.e2e_s:g} s")
        return " and ".join(parts)


#: The SLO-aware paper's defaults (004, section 5.1): chat TTFT <= 10 s and TPOT <= 50 ms;
#: code E2E <= 30 s.
PAPER_SLOS: dict[str, TaskSLO] = {
    "chat": TaskSLO(ttft_s=10.0, tpot_s=0.050),
    "code": TaskSLO(e2e_s=30.0),
}

#: "auto": each task's E2E SLO is this many times the latency of its average request served
#: alone (004 section 5.1, after Prekas et al.).
AUTO_SLO_FACTOR = 10.0


class SLOConfig(InputModel):
    """Which SLOs a run uses. ``custom`` limits override the paper preset task by task."""

    preset: Literal["paper", "custom", "auto"] = "paper"
    chat: TaskSLO | None = None
    code: TaskSLO | None = None
    auto_factor: float = Field(default=AUTO_SLO_FACTOR, gt=0, le=1e6, description="auto: E2E SLO = this x alone")

    @model_validator(mode="after")
    def _custom_needs_limits(self) -> "SLOConfig":
        if self.preset == "custom" and self.chat is None and self.code is None:
            raise ValueError("preset 'custom' needs limits under slo.chat and/or slo.code")
        return self

    def resolve(self, alone_e2e_by_task: dict[str, float] | None = None) -> dict[str, TaskSLO]:
        """The SLO of each task. ``auto`` needs each task's average-request-alone E2E (seconds)."""
        if self.preset == "auto":
            if not alone_e2e_by_task:
                raise ValueError("preset 'auto' needs a latency model to compute lone-request latency")
            return {task: TaskSLO(e2e_s=self.auto_factor * e2e) for task, e2e in alone_e2e_by_task.items()}
        resolved = dict(PAPER_SLOS)
        if self.preset == "custom":
            if self.chat is not None:
                resolved["chat"] = self.chat
            if self.code is not None:
                resolved["code"] = self.code
        return resolved
