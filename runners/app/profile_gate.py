"""The step profiler's session with its quality gate (issue 48): measure each phase with the
probe and the machine's load recorded, fit, judge each phase against the gate, measure a failing
phase once more, and say whether the profile may be written
(:mod:`runners.app.profile_quality` holds the parts; ``python -m runners profile`` runs this).

Units: seconds; tokens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runners.app.profile_quality import (
    MachineLoad,
    PhaseVerdict,
    Probe,
    judge_phase,
    quality_record,
    repeatability,
    with_shared_noise,
)
from runners.app.profiler import (
    PHASES,
    STEP_KINDS,
    StepGrid,
    StepSample,
    fit_step_profile,
    measure_steps,
    warm_up_shapes,
)
from runners.engines.openai_client import Endpoint
from runners.engines.profile import EngineProfile
from runners.engines.real_config import ProfileGate
from runners.errors import SchedlabError

#: Seconds the machine is watched, the engine idle, before anything is measured.
QUIET_CHECK_S = 5.0


class BusyMachine(SchedlabError):
    """Other processes kept the machine busy before profiling began: nothing was measured."""


def quiet_check(base_url: str, gate: ProfileGate, seconds: float = QUIET_CHECK_S) -> dict[str, Any]:
    """The machine's load over ``seconds`` with the engine idle (:class:`MachineLoad`);
    :class:`BusyMachine` naming the cores other processes used when that is over
    ``gate.max_other_cores`` (judged only where the server's processes were found here)."""
    machine = MachineLoad(base_url).start()
    time.sleep(seconds)
    load = machine.finish()
    if not load["others_include_server"] and load["other_cores"] > gate.max_other_cores:
        raise BusyMachine(
            f"profile: not started: other processes used {load['other_cores']:.2f} of {load['cores']} cores "
            f"in the {seconds:g} s before profiling, over {gate.max_other_cores:g} (engine.profile_gate."
            "max_other_cores): a profile measured now would time the other work as well as the engine; "
            "nothing was measured (--accept-noisy profiles anyway and marks the profile noisy)"
        )
    return load


@dataclass
class GatedProfile:
    """A profiling session's outcome: the fitted ``profile`` (its ``quality`` entry filled), the
    samples it was fitted from, the samples of a first pass a phase's second measurement replaced,
    each step kind's verdict and the phases measured again."""

    profile: EngineProfile
    samples: list[StepSample]
    replaced: list[StepSample] = field(default_factory=list)
    verdicts: list[PhaseVerdict] = field(default_factory=list)
    remeasured: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def failed(self) -> list[PhaseVerdict]:
        return [v for v in self.verdicts if not v.passed]


def _measure_phase(
    endpoint: Endpoint,
    grid: StepGrid,
    max_num_batched_tokens: int,
    phase: str,
    timeout_s: float,
    seed: int,
    say: Callable[[str], None],
) -> tuple[list[StepSample], list[Probe], dict[str, Any]]:
    """One phase alone (warm-up, probes before, during and after it): its samples, probes and the
    machine's load while it ran."""
    probes: list[Probe] = []
    machine = MachineLoad(endpoint.base_url).start()
    samples = asyncio.run(
        measure_steps(
            endpoint, grid, max_num_batched_tokens, timeout_s, seed=seed, progress=say, phases=[phase], probes=probes
        )
    )
    return samples, probes, machine.finish()


@dataclass
class _Phase:
    samples: list[StepSample]
    probes: list[Probe]
    load: dict[str, Any]


def _judge(
    phases: dict[str, _Phase], gate: ProfileGate, limits: dict[str, Any]
) -> tuple[EngineProfile, list[PhaseVerdict]]:
    samples = [s for phase in PHASES if phase in phases for s in phases[phase].samples]
    profile = fit_step_profile(samples, **limits)
    cv = (profile.fit or {}).get("cross_validation", {})
    verdicts = [
        judge_phase(
            name,
            float(cv[name]["mape"]) if name in STEP_KINDS and name in cv else None,
            phases[name].probes,
            phases[name].load,
            gate,
        )
        for name in PHASES
        if name in phases
    ]
    return profile, with_shared_noise(verdicts)


def _session_load(phases: Sequence[_Phase]) -> dict[str, Any]:
    """The whole session's load: the phases' CPU seconds and wall seconds summed."""
    loads = [p.load for p in phases]
    keys = ("wall_s", "machine_cpu_s", "profiler_cpu_s", "other_cpu_s")
    total: dict[str, Any] = {key: sum(float(load.get(key) or 0.0) for load in loads) for key in keys}
    server: list[float | None] = [load.get("server_cpu_s") for load in loads]
    total["server_cpu_s"] = None if None in server else float(sum(v or 0.0 for v in server))
    total["other_cores"] = total["other_cpu_s"] / total["wall_s"] if total["wall_s"] > 0 else 0.0
    total["cores"] = loads[0]["cores"] if loads else 1
    total["others_include_server"] = any(load.get("others_include_server") for load in loads)
    return total


def profile_with_gate(
    endpoint: Endpoint,
    grid: StepGrid,
    max_num_batched_tokens: int,
    limits: dict[str, Any],
    gate: ProfileGate,
    accept_noisy: bool = False,
    timeout_s: float = 600.0,
    seed: int = 0,
    say: Callable[[str], None] = print,
    phases: Sequence[str] = PHASES,
) -> GatedProfile:
    """Measure each phase against the idle server at ``endpoint`` (the probe and the machine's
    load recorded per phase), fit the linear step model (``limits``: :func:`fit_step_profile`'s
    name, source and engine limits), judge each phase against ``gate``; measure a failing phase
    once more (its new samples, probes and load replace the first ones) and judge again. The
    profile carries the ``quality`` record; ``accepted_noisy`` in it is True only when it failed
    and ``accept_noisy``. ``phases``: those of :data:`PHASES` to run (default all). First the
    machine is watched for :data:`QUIET_CHECK_S` (:func:`quiet_check`): a machine already busy is
    refused before anything is measured, unless ``accept_noisy``."""
    busy_line = None
    try:
        before = quiet_check(endpoint.base_url, gate)
    except BusyMachine as busy:
        if not accept_noisy:
            raise
        busy_line = str(busy).removeprefix("profile: not started: ")
        say(f"busy before profiling: {busy_line}")
        before = None
    asyncio.run(warm_up_shapes(endpoint, grid, max_num_batched_tokens, timeout_s, seed))
    measured: dict[str, _Phase] = {}
    for index, name in enumerate(PHASES):
        if name in phases:
            measured[name] = _Phase(
                *_measure_phase(endpoint, grid, max_num_batched_tokens, name, timeout_s, seed + index, say)
            )
    profile, verdicts = _judge(measured, gate, limits)
    failed = [v.phase for v in verdicts if not v.passed]
    first_pass = {v.phase: v.line() for v in verdicts if not v.passed}
    replaced: list[StepSample] = []
    for verdict in verdicts:
        if not verdict.passed:
            say(f"quality gate: {verdict.line()}; measuring the {verdict.phase} phase again")
            again = _Phase(
                *_measure_phase(
                    endpoint, grid, max_num_batched_tokens, verdict.phase, timeout_s, seed + 100 + len(replaced), say
                )
            )
            replaced += measured[verdict.phase].samples
            measured[verdict.phase] = again
    if failed:
        profile, verdicts = _judge(measured, gate, limits)
    passed = all(v.passed for v in verdicts)
    all_probes = [probe for phase in measured.values() for probe in phase.probes]
    quality = quality_record(
        verdicts,
        repeatability(all_probes),
        _session_load(list(measured.values())),
        failed,
        accepted_noisy=accept_noisy and not (passed and busy_line is None),
        gate=gate,
    )
    quality["before"] = before
    quality["first_pass"] = first_pass  # why each phase measured again failed the first time
    if busy_line is not None:  # measured although the machine was busy before (--accept-noisy)
        quality["passed"] = False
        quality["failed"] = {"before": f"before profiling: {busy_line}", **quality["failed"]}
    profile = profile.model_copy(update={"quality": quality})
    samples = [s for phase in measured.values() for s in phase.samples]
    return GatedProfile(profile, samples, replaced, verdicts, failed)


__all__ = ["GatedProfile", "profile_with_gate"]
