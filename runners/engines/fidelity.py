"""How close the simulator comes to the real engine: the fidelity report a profile carries.

``bench/sim_fidelity.py`` runs one workload at several load levels (fractions of the real
engine's measured capacity) and several seeds on the real engine, then on the simulator with the
profile, with the same requests and arrival times. For every level and quantity (mean and p90 of
TTFT, TPOT and E2E; output throughput) each seed gives a relative error

    error = (simulated - real) / real

and the level reports, over seeds, the **mean absolute error** mean |error| with a 95% Student-t
interval (scipy.stats.t, n - 1 degrees of freedom; none for one seed) - what is judged, so errors
of opposite signs cannot cancel (issue 25: -9.2%, +4.2%, -2.2% is a mean absolute error of 5.2%,
not "-2.4% ok") - and beside it the signed mean error with its interval (the **bias**: the
simulator fast when negative) and the largest |error| of any seed. A level is below saturation
when its offered rate is under the measured capacity. Targets (issue 13): mean |error| of every
mean <= 5% below saturation and <= 10% above; of every p90 <= 10% below saturation (p90 above
saturation and throughput: reported, no target). ``met``: the mean absolute error within the
target; ``met_surely``: its whole interval within it (None without an interval).

The report is a plain mapping (JSON in the bench's results, ``fidelity`` in the profile file)::

    schema: schedlab.fidelity/1
    profile, engine, workload, date, capacity_rps, seeds, requests_per_run
    levels: [{level, rate_rps, saturated, seeds, quantities: {"ttft_s.mean": {real, sim, errors,
              mean_abs_error, abs_ci95, mean_error, ci95, max_abs_error, target, met,
              met_surely}, ...}}, ...]
    failed_levels: [{level, rate_rps, error}]     # levels that could not be measured (kept out)

Schema 2 judges the mean absolute error; a schema-1 report (judged on the signed mean, no
``mean_abs_error``) still reads: its ``met`` is recomputed from its per-seed ``errors``.

A profile without a report is labelled by :func:`validation_label`: a bundled preset of a
paper's coefficients (the Qwen2.5-7B / 2 x V100 preset of 004 Table 2, which every reproduction
and Demo run uses) says "paper coefficients, not validated here" wherever it is shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from runners.errors import ConfigError
from runners.metrics.catalog import summary_value
from runners.metrics.seed_statistics import mean_interval

FIDELITY_SCHEMA = "schedlab.fidelity/2"
#: What a profile that was never compared with a real engine is called, by where it came from.
PAPER_PRESET_LABEL = "paper coefficients, not validated here"
UNVALIDATED_LABEL = "not validated here (no fidelity report: bench/sim_fidelity.py makes one)"

#: The latency metrics compared (summary key, label) and the statistics of each.
LATENCY_METRICS: tuple[tuple[str, str], ...] = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
LATENCY_STATS: tuple[str, ...] = ("mean", "p90")
#: Output throughput (summary key, label).
THROUGHPUT: tuple[str, str] = ("output_throughput_tps", "output tok/s")

#: Targets, as |relative error| (issue 13 section 3).
MEAN_TARGET_BELOW_SATURATION = 0.05
MEAN_TARGET_ABOVE_SATURATION = 0.10
P90_TARGET_BELOW_SATURATION = 0.10

#: Load levels are fractions of the measured capacity: above 0 and at most this.
MAX_LEVEL = 3.0


def quantity_keys() -> list[str]:
    """Every compared quantity, as ``"<summary key>.<stat>"`` (latencies) or the throughput key."""
    return [f"{key}.{stat}" for key, _ in LATENCY_METRICS for stat in LATENCY_STATS] + [THROUGHPUT[0]]


def quantity_label(key: str) -> str:
    """``"ttft_s.mean"`` -> ``"mean TTFT"``; the throughput key -> ``"output tok/s"``."""
    if key == THROUGHPUT[0]:
        return THROUGHPUT[1]
    metric, stat = key.split(".")
    return f"{stat} {dict(LATENCY_METRICS)[metric]}"


def target_for(key: str, saturated: bool) -> float | None:
    """The |error| target of quantity ``key`` at a level below or above saturation (None: no target)."""
    if key == THROUGHPUT[0]:
        return None
    if key.endswith(".mean"):
        return MEAN_TARGET_ABOVE_SATURATION if saturated else MEAN_TARGET_BELOW_SATURATION
    return None if saturated else P90_TARGET_BELOW_SATURATION


def parse_levels(text: str) -> list[float]:
    """``"0.2,0.5,0.8,1.2"`` -> sorted distinct fractions; ConfigError naming ``--levels`` otherwise."""
    try:
        levels = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(
            "--levels", f"{text!r}: expected comma-separated fractions of capacity, e.g. 0.2,0.5,0.8,1.2"
        ) from None
    if not levels:
        raise ConfigError("--levels", "expected at least one load level")
    bad = [level for level in levels if not (0 < level <= MAX_LEVEL) or not math.isfinite(level)]
    if bad:
        raise ConfigError(
            "--levels",
            f"{bad[0]:g} is not a load level: expected a fraction of the measured capacity "
            f"above 0 and at most {MAX_LEVEL:g}",
        )
    return levels


def _value(summary: dict[str, Any], key: str) -> float:
    """The quantity ``key`` of a run's summary (NaN when absent, so its error is left out)."""
    value = summary_value(summary, key)
    return float("nan") if value is None else value


def _mean_and_interval(values: np.ndarray) -> tuple[float, list[float] | None]:
    """The mean of ``values`` and its 95% Student t interval
    (:func:`runners.metrics.seed_statistics.mean_interval`; None for fewer than two)."""
    if not len(values):
        return float("nan"), None
    interval = mean_interval(values.tolist())
    return float(values.mean()), None if interval is None else list(interval)


def _judged(mean_abs_error: float, abs_ci95: list[float] | None, target: float | None) -> dict[str, bool | None]:
    """``met`` (the mean absolute error within ``target``) and ``met_surely`` (its interval's top
    within it); None where there is no target, value or interval."""
    if target is None or not math.isfinite(mean_abs_error):
        return {"met": None, "met_surely": None}
    return {"met": mean_abs_error <= target, "met_surely": None if abs_ci95 is None else abs_ci95[1] <= target}


def judged_quantity(q: dict[str, Any]) -> dict[str, Any]:
    """A report quantity with ``mean_abs_error``, ``abs_ci95``, ``met`` and ``met_surely`` as
    schema 2 has them, recomputed from its per-seed ``errors`` when it comes from a schema-1
    report (which judged the signed mean)."""
    if "mean_abs_error" in q:
        return q
    finite = np.array([e for e in q.get("errors") or [] if isinstance(e, (int, float)) and math.isfinite(e)])
    mean_abs_error, abs_ci95 = _mean_and_interval(np.abs(finite))
    return {
        **q,
        "mean_abs_error": mean_abs_error,
        "abs_ci95": abs_ci95,
        **_judged(mean_abs_error, abs_ci95, q.get("target")),
    }


def compare_level(
    level: float,
    rate_rps: float,
    seeds: Sequence[int],
    real: Sequence[dict[str, Any]],
    simulated: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """One level of the report from the real and simulated summaries of the same seeds (paired)."""
    if not (len(seeds) == len(real) == len(simulated)) or not seeds:
        raise ValueError("compare_level: one real and one simulated summary per seed")
    saturated = level >= 1.0
    quantities: dict[str, Any] = {}
    for key in quantity_keys():
        real_values = [_value(s, key) for s in real]
        sim_values = [_value(s, key) for s in simulated]
        errors = [(sim - rl) / rl if rl else float("nan") for sim, rl in zip(sim_values, real_values)]
        finite = np.array([e for e in errors if math.isfinite(e)])
        mean_error, ci95 = _mean_and_interval(finite)
        mean_abs_error, abs_ci95 = _mean_and_interval(np.abs(finite))
        target = target_for(key, saturated)
        quantities[key] = {
            "real": real_values,
            "sim": sim_values,
            "errors": errors,
            "mean_abs_error": mean_abs_error,
            "abs_ci95": abs_ci95,
            "mean_error": mean_error,
            "ci95": ci95,
            "max_abs_error": float(np.abs(finite).max()) if len(finite) else float("nan"),
            "target": target,
            **_judged(mean_abs_error, abs_ci95, target),
        }
    return {
        "level": level,
        "rate_rps": rate_rps,
        "saturated": saturated,
        "seeds": list(seeds),
        "quantities": quantities,
    }


def noise_floor(level: dict[str, Any], key: str) -> float | None:
    """The real engine's own run-to-run difference for ``key`` at ``level`` (|second - first| /
    first of one seed run twice, ``real_repeat``), or None when the level was not repeated."""
    repeat = (level.get("real_repeat") or {}).get(key)
    return abs(repeat) if isinstance(repeat, (int, float)) and math.isfinite(repeat) else None


def resolvable(level: dict[str, Any], key: str, target: float | None) -> bool | None:
    """Whether this machine can tell a miss of ``target`` from noise at ``level``: the real
    engine's difference from itself is within the target (True), beyond it (False), or was not
    measured or there is no target (None)."""
    floor = noise_floor(level, key)
    return None if floor is None or target is None else floor <= target


def missed_targets(report: dict[str, Any]) -> list[str]:
    """One line per (level, quantity) whose target is missed, saying by how much and the bias, and,
    where the real engine differed from itself by more than the target, that this machine cannot
    resolve the miss (and whether the error is larger than that difference)."""
    lines = []
    for level in report.get("levels", []):
        for key, raw in level["quantities"].items():
            q = judged_quantity(raw)
            if q.get("met") is False:
                line = (
                    f"{level['level']:.0%} load: {quantity_label(key)} mean |error| {q['mean_abs_error']:.1%} "
                    f"(target within {q['target']:.0%}, missed by {q['mean_abs_error'] - q['target']:.1%}; "
                    f"bias {q['mean_error']:+.1%})"
                )
                floor = noise_floor(level, key)
                if resolvable(level, key, q["target"]) is False and floor is not None:
                    size = "larger than" if q["mean_abs_error"] > floor else "within"
                    line += (
                        f"; not resolvable here: the real engine differed from itself by {floor:.1%}, above the "
                        f"target (the error is {size} that)"
                    )
                lines.append(line)
    return lines


def nearest_level(report: dict[str, Any], rate_rps: float | None) -> dict[str, Any] | None:
    """The report's level closest to ``rate_rps`` (offered req/s; None: all at once, the highest)."""
    levels = report.get("levels") or []
    if not levels:
        return None
    if rate_rps is None or not math.isfinite(rate_rps):
        return max(levels, key=lambda lv: lv["level"])
    return min(levels, key=lambda lv: abs(lv["rate_rps"] - rate_rps))


def validation_label(profile_name: str, source: str = "", report: dict[str, Any] | None = None) -> str | None:
    """How far to trust a profile that has no fidelity report: :data:`PAPER_PRESET_LABEL` for a
    bundled preset of a paper's coefficients, :data:`UNVALIDATED_LABEL` for any other; None when
    it carries a report (:func:`fidelity_sentence` says what it showed)."""
    if report and report.get("levels"):
        return None
    from runners.engines.profile import PRESETS

    preset = PRESETS.get(profile_name)
    if preset is not None and "paper" in (source or preset.source).lower():
        return PAPER_PRESET_LABEL
    return UNVALIDATED_LABEL


def fidelity_sentence(
    profile_name: str, report: dict[str, Any] | None, rate_rps: float | None, source: str = ""
) -> str:
    """What a simulated run with this profile can be trusted for, in one sentence (the Launch
    and Results pages show it beside any simulated run): the mean absolute errors at the report's
    level nearest ``rate_rps``, or the profile's :func:`validation_label` when it has no report."""
    label = validation_label(profile_name, source, report)
    if label is not None or not report:
        return f"simulated with profile {profile_name}: {label}"
    level = nearest_level(report, rate_rps)
    assert level is not None
    q = {key: judged_quantity(value) for key, value in level["quantities"].items()}

    def err(key: str) -> str:
        value = q[key]["mean_abs_error"]
        return "n/a" if not math.isfinite(value) else f"{value:.1%}"

    seeds = len(level["seeds"])
    misses = [quantity_label(k) for k, v in q.items() if v.get("met") is False]
    noisy = [
        quantity_label(k) for k, v in q.items() if v.get("met") is False and resolvable(level, k, v["target"]) is False
    ]
    verdict = f"misses the target for {', '.join(misses)}" if misses else "meets the fidelity targets"
    if noisy:
        verdict += f" ({', '.join(noisy)}: the real engine differed from itself by more than the target)"
    return (
        f"simulated with profile {profile_name}: mean TTFT within {err('ttft_s.mean')} of the real engine "
        f"(mean |error| over seeds; TPOT {err('tpot_s.mean')}, E2E {err('e2e_s.mean')}, output tok/s "
        f"{err(THROUGHPUT[0])}) at {level['level']:.0%} of its capacity ({level['rate_rps']:.3g} req/s, {seeds} "
        f"seed{'s' if seeds != 1 else ''}, {report.get('workload', 'its workload')}); {verdict} there"
    )
