"""How far a measured profile can be trusted (issue 48): the profiler's own repeatability, the
machine's load while it ran, a robust fit, and the quality gate that refuses a bad profile.

- **Probe.** A fixed step is measured again and again through the session (one prompt of
  :data:`PROBE_PROMPT_TOKENS` tokens alone on the idle engine, :data:`PROBE_OUTPUT_TOKENS` tokens
  out): the engine's prefill time of it (vLLM's ``request_prefill_time``) and the client's median
  gap between its tokens. Their spread (slowest / fastest) is the profiler's repeatability: on a
  quiet machine the same step takes the same time; on a busy one it does not.
- **Load.** The 1-minute load average at every probe, and the CPU time of the session split into
  the profiler's own process, the server's processes (found by the port it listens on, when it
  runs on this machine) and everything else (``psutil``, from ``/proc``).
- **Robust fit.** Repeats of one grid point are summarised by their median; then the samples whose
  relative error against a first fit is far beyond the rest (more than :data:`OUTLIER_SIGMAS`
  robust standard deviations and :data:`OUTLIER_MIN_ERROR`) are flagged and left out of the
  fit, at most :data:`OUTLIER_MAX_SHARE` of them; the profile lists them.
- **Gate** (:class:`~runners.engines.real_config.ProfileGate`, ``engine.profile_gate``; its
  defaults and their justification are there). Each phase is judged on its own: its step kind's
  out-of-fold error (prefill, decode, mixed) and the cores other processes used while it ran. A
  failing phase is measured again; if it still fails, the profiler refuses to write the profile
  unless told ``--accept-noisy`` (then the profile is marked so). The cause is named from the
  other processes and the probe's coefficient of variation: a noisy machine, or, on a quiet one,
  a step model that does not fit the engine.

Units: seconds; tokens; CPU seconds.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from runners.engines.real_config import ProfileGate

#: The probe: one prompt of this many tokens, this many tokens out, alone on the idle engine.
PROBE_PROMPT_TOKENS = 128
PROBE_OUTPUT_TOKENS = 24
#: Outliers: relative error beyond this many robust standard deviations (1.4826 x MAD) of the
#: first fit's relative errors, and beyond this error, at most this share of the samples.
OUTLIER_SIGMAS = 5.0
OUTLIER_MIN_ERROR = 0.5
OUTLIER_MAX_SHARE = 0.10


@dataclass(frozen=True)
class Probe:
    """One probe: seconds since the session started, the engine's prefill time of the probe
    prompt (None where the server's metrics do not give it), the client's median token gap, and
    the 1-minute load average then."""

    at_s: float
    prefill_s: float | None
    decode_gap_s: float | None
    load_average: float


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    """Median, slowest / fastest, coefficient of variation of positive ``values`` (None: fewer than 2)."""
    kept = [v for v in values if v is not None and v > 0]
    if len(kept) < 2:
        return None
    return {
        "median_s": float(statistics.median(kept)),
        "spread": float(max(kept) / min(kept)),
        "cv": float(statistics.pstdev(kept) / statistics.fmean(kept)),
        "n": len(kept),
    }


def repeatability(probes: Sequence[Probe]) -> dict[str, Any]:
    """The probes' spread per signal (``prefill``, ``decode``: median seconds, slowest / fastest,
    CV, count), their count, the highest 1-minute load average seen at a probe and when each
    probe ran (seconds into the session)."""
    return {
        "probes": len(probes),
        "prefill": _spread([p.prefill_s for p in probes if p.prefill_s is not None]),
        "decode": _spread([p.decode_gap_s for p in probes if p.decode_gap_s is not None]),
        "probe": f"{PROBE_PROMPT_TOKENS}-token prompt alone, {PROBE_OUTPUT_TOKENS} tokens out",
        "peak_load_average": max((p.load_average for p in probes), default=None),
        "seconds": [round(p.at_s, 3) for p in probes],
    }


# -- machine load ----------------------------------------------------------------------------------
def server_processes(base_url: str) -> list[Any]:
    """The processes of the server listening on ``base_url``'s port when it runs on this machine
    (its host is a loopback name or address), with their children (vLLM's engine core runs in a
    child); empty when it is elsewhere or cannot be found."""
    import psutil

    parts = urlsplit(base_url)
    if parts.hostname not in {"127.0.0.1", "localhost", "::1", "0.0.0.0"}:
        return []
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        pids = {c.pid for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port and c.pid}
    except (psutil.Error, OSError):
        return []
    own = os.getpid()
    found: dict[int, Any] = {}
    for pid in pids - {own}:
        try:
            process = psutil.Process(pid)
            for member in [process, *process.children(recursive=True)]:
                found[member.pid] = member
        except psutil.Error:
            continue
    return list(found.values())


def _cpu_seconds(processes: Sequence[Any]) -> float:
    import psutil

    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()  # its own threads: a child is counted as a process of its own
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


@dataclass
class MachineLoad:
    """The CPU time of a profiling session, split into this process, the server and the rest.
    :meth:`start` at the session's start, :meth:`finish` at its end."""

    base_url: str
    started: float = 0.0
    machine_busy: float = 0.0
    own: float = 0.0
    server: float = 0.0
    servers: list[Any] = field(default_factory=list)

    def _machine_busy(self) -> float:
        import psutil

        times = psutil.cpu_times()
        return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))

    def _own(self) -> float:
        import psutil

        return _cpu_seconds([psutil.Process()])

    def start(self) -> "MachineLoad":
        self.servers = server_processes(self.base_url)
        self.started = time.monotonic()
        self.machine_busy, self.own, self.server = self._machine_busy(), self._own(), _cpu_seconds(self.servers)
        return self

    def finish(self) -> dict[str, Any]:
        """The session's wall seconds, cores, CPU seconds (machine, profiler, server or None where it
        was not found on this machine, other processes) and the other processes' mean cores."""
        import psutil

        wall = time.monotonic() - self.started
        machine = self._machine_busy() - self.machine_busy
        own = self._own() - self.own
        server = _cpu_seconds(self.servers) - self.server if self.servers else None
        others = max(0.0, machine - own - (server or 0.0))
        return {
            "wall_s": wall,
            "cores": psutil.cpu_count() or 1,
            "machine_cpu_s": machine,
            "profiler_cpu_s": own,
            "server_cpu_s": server,
            "other_cpu_s": others,
            "other_cores": others / wall if wall > 0 else 0.0,
            "others_include_server": server is None,
        }


def load_average() -> float:
    """The machine's 1-minute load average (0 where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


# -- robust fit ------------------------------------------------------------------------------------
def _key(sample: Any) -> tuple:
    return (
        sample.kind,
        sample.prefill_requests,
        sample.prefill_tokens,
        sample.decode_requests,
        sample.decode_context,
        sample.prefill_context,
        sample.steps,
        sample.signal,
    )


def median_of_repeats(samples: Sequence[Any]) -> list[Any]:
    """One sample per grid point measured more than once (the same kind, tokens, requests and
    context): the first of them with the median of their seconds; order kept."""
    groups: dict[tuple, list[Any]] = {}
    for sample in samples:
        groups.setdefault(_key(sample), []).append(sample)
    out = []
    for group in groups.values():
        seconds = float(np.median([s.seconds for s in group]))
        out.append(group[0] if len(group) == 1 else replace(group[0], seconds=seconds))
    return out


def outliers(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Indices of the samples whose relative error ``(predicted - measured) / measured`` is beyond
    :data:`OUTLIER_SIGMAS` robust standard deviations of all of them and beyond
    :data:`OUTLIER_MIN_ERROR`, worst first, at most :data:`OUTLIER_MAX_SHARE` of the samples."""
    errors = np.abs(predicted - measured) / np.maximum(measured, 1e-9)
    sigma = 1.4826 * float(np.median(np.abs(errors - np.median(errors))))
    bound = max(OUTLIER_MIN_ERROR, float(np.median(errors)) + OUTLIER_SIGMAS * sigma)
    beyond = np.flatnonzero(errors > bound)
    worst = beyond[np.argsort(-errors[beyond])]
    return worst[: int(OUTLIER_MAX_SHARE * len(measured))]


# -- the gate --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseVerdict:
    """One phase of a profiling session against the gate (a :class:`ProfileGate`): its step kind's
    out-of-fold error (None for the phases that fit no step kind: interference, prefix), the
    probe's coefficient of variation within it (None: fewer than 3 probes), the cores other
    processes used meanwhile (None: the server was not found on this machine), the reasons it
    failed (empty: passed) and whether the machine was noisy (other processes over the gate, or
    the probe's CV over ``max_probe_cv``: the likely cause named, not a reason to fail)."""

    phase: str
    error: float | None
    probe_cv: float | None
    other_cores: float | None
    cores: int
    reasons: tuple[str, ...]
    noisy: bool = False
    #: noisy phases whose steps share this one's fit (the step model is fitted on every kind)
    shared_with: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def cause(self) -> str:
        cv = "no probe" if self.probe_cv is None else f"probe CV {self.probe_cv:.0%}"
        others = "" if self.other_cores is None else f", other processes {self.other_cores:.2f} cores"
        if self.noisy:
            return f"a noisy machine ({cv}{others})"
        if self.shared_with:
            return (
                f"this phase ran on a quiet machine ({cv}{others}), but the step model it is predicted with is "
                f"fitted on the steps of the noisy {' and '.join(self.shared_with)} "
                f"phase{'s' if len(self.shared_with) > 1 else ''} too"
            )
        return f"a quiet machine ({cv}{others}): the linear step model does not fit this engine's {self.phase} steps"

    def line(self) -> str:
        """One line naming the phase, what failed and the likely cause."""
        return f"{self.phase} phase: {'; '.join(self.reasons)}: {self.cause}"


def judge_phase(
    phase: str,
    error: float | None,
    probes: Sequence[Probe],
    load: dict[str, Any] | None,
    gate: ProfileGate,
) -> PhaseVerdict:
    """The verdict of one phase: it fails when its step kind's out-of-fold ``error`` is over
    ``gate.max_error`` or the other processes' cores from ``load`` (:meth:`MachineLoad.finish`)
    are over ``gate.max_other_cores``. The CV of the probe's decode gap and prefill time within it
    (the larger of the two, from 3 probes) is reported; where other processes cannot be counted (the
    server is on another machine) a CV over ``gate.max_probe_cv`` names a noisy machine as the
    likely cause. It fails nothing by itself: on the quiet 2-core machine the probe varied 19-53%
    within phases of the default grid (bench/results/profile_noise.md)."""
    cvs = [
        found["cv"]
        for found in (
            _spread([p.prefill_s for p in probes if p.prefill_s is not None]),
            _spread([p.decode_gap_s for p in probes if p.decode_gap_s is not None]),
        )
        if found is not None and found["n"] >= 3
    ]
    probe_cv = max(cvs) if cvs else None
    cores = int((load or {}).get("cores") or os.cpu_count() or 1)
    others = None if not load or load.get("others_include_server") else float(load["other_cores"])
    busy = others is not None and others > gate.max_other_cores
    reasons = []
    if error is not None and error > gate.max_error:
        reasons.append(f"out-of-fold error {error:.0%} over {gate.max_error:.0%} (engine.profile_gate.max_error)")
    if busy:
        reasons.append(
            f"other processes used {others:.2f} of {cores} cores, over {gate.max_other_cores:g} "
            "(engine.profile_gate.max_other_cores)"
        )
    # the probe names the cause only where other processes cannot be counted (a server elsewhere):
    # on this machine, quiet, it varied 19-53% within phases while other processes used 0.00 cores
    noisy = busy or (others is None and probe_cv is not None and probe_cv > gate.max_probe_cv)
    return PhaseVerdict(phase, error, probe_cv, others, cores, tuple(reasons), noisy)


def quality_record(
    verdicts: Sequence[PhaseVerdict],
    probes: dict[str, Any],
    load: dict[str, Any] | None,
    remeasured: Sequence[str],
    accepted_noisy: bool,
    gate: ProfileGate,
) -> dict[str, Any]:
    """The profile's ``quality`` entry (JSON): the gate's thresholds, whether it passed, each
    phase's error, probe CV, other processes' cores and reasons, the phases measured again,
    whether it was written only because of ``--accept-noisy``, the probes' repeatability over the
    session and the session's load."""
    return {
        "gate": gate.model_dump(),
        "passed": all(v.passed for v in verdicts),
        "phases": {
            v.phase: {
                "error": v.error,
                "probe_cv": v.probe_cv,
                "other_cores": v.other_cores,
                "reasons": list(v.reasons),
            }
            for v in verdicts
        },
        "failed": {v.phase: v.line() for v in verdicts if not v.passed},
        "remeasured": list(remeasured),
        "accepted_noisy": accepted_noisy,
        "repeatability": probes,
        "load": load,
    }


def with_shared_noise(verdicts: Sequence[PhaseVerdict]) -> list[PhaseVerdict]:
    """``verdicts`` with each quiet, failing phase told which noisy phases share its fit: one step
    model is fitted on every kind's steps, so noise in one phase raises the out-of-fold error of
    the others (a quiet prefill phase measured 186% beside noisy decode and mixed phases)."""
    noisy = tuple(v.phase for v in verdicts if v.noisy)
    return [
        replace(v, shared_with=tuple(p for p in noisy if p != v.phase)) if not v.passed and not v.noisy else v
        for v in verdicts
    ]
