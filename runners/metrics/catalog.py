"""The metric catalog: every number schedlab shows, with its label, unit, direction and format.

One entry per quantity; the CLI tables (``run``, ``show``, ``compare``, studies), the Results
page's comparison table and charts, the study statistics and verdicts, the Demo and the exports
all read it, so adding a metric is one entry here. A quantity has one display unit everywhere it
is shown: latencies in seconds except TPOT and ITL, in milliseconds (the live view, the tables, the
CDFs and the SLO inputs alike); shares in percent. :meth:`Metric.format` is the one place a value is
rounded for display, :meth:`Metric.shown` the number that text reads, so a comparison of two shown
values agrees with what a person reads.

- :data:`RUN_METRICS`: per-run values, ``key`` a dotted path into ``summary.json`` (stored in
  seconds, fractions, 1/s, counts).
- :data:`TABLE_METRICS`: the single-run comparison table: :data:`RUN_METRICS` with medians (p50),
  inter-token latency, queue-time percentiles and input tokens/s beside them (studies and the CLI
  keep :data:`RUN_METRICS`).
- :data:`REQUEST_METRICS`: per-request values, ``key`` a column of ``requests.parquet`` (stored
  in seconds).
- :data:`TIMESERIES_METRICS`: values sampled while a run goes, ``key`` a column of
  ``timeseries.parquet`` (the charts of engine state over time; :func:`timeseries_metric`).

Displayed value = stored value x ``scale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from runners.json_values import dotted_value, is_stored
from runners.registries import Registry


@dataclass(frozen=True)
class Metric:
    """One quantity. ``key``: where it is stored (dotted summary path or request column);
    ``label``: its display name with the display unit in brackets; ``unit``: the display unit;
    ``higher_is_better``: which way a change is good; ``scale``: display = stored x scale;
    ``decimals``: digits after the point when displayed (None: 4 significant digits)."""

    key: str
    label: str
    higher_is_better: bool
    unit: str = ""
    scale: float = 1.0
    decimals: int | None = None
    real_engines_only: bool = False  # a table row only when some shown run has the value
    describes_setting: bool = False  # how contended the run was, not how good the scheduler is: no verdict
    definition: str = ""  # how the value is computed, where a label alone does not say
    lower: float | None = 0.0  # the smallest value it can take (stored units; None: none)
    upper: float | None = None  # the largest (1.0 for a share; None: none)

    def display(self, value: Any) -> float | None:
        """The stored ``value`` in display units; None when it is not a finite number."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) * self.scale if math.isfinite(value) else None

    def format(self, value: Any) -> str:
        """The stored ``value`` as display text (no unit); ``-`` when missing."""
        shown = self.display(value)
        if shown is None:
            return "-"
        text = f"{shown:.4g}" if self.decimals is None else f"{shown:.{self.decimals}f}"
        return text[1:] if text.startswith("-") and not text.strip("-0.") else text  # no "-0"

    def shown(self, value: Any) -> float | None:
        """The stored ``value`` as the number its display text reads (rounded as :meth:`format`
        rounds it); None when missing. Two values whose texts read alike are equal here."""
        text = self.format(value)
        return None if text == "-" else float(text)

    def value_interval(self, low: Any, high: Any) -> tuple[float | None, float | None, bool]:
        """An interval of the metric's value (stored units) cut to what the value can be (0 to 1
        for a share, 0 upward otherwise), and whether it was cut. The metric's true value lies in
        that range, so the cut interval covers it whenever the uncut one did: the 95% coverage
        holds (:data:`CUT_NOTE`). Missing ends stay None."""
        return _cut(low, high, self.lower, self.upper)

    def change_interval(self, low: Any, high: Any) -> tuple[float | None, float | None, bool]:
        """An interval of a difference of two values (stored units) cut to what a difference can
        be (-1 to +1 for a share; uncut where the range is open), and whether it was cut."""
        if self.lower is None or self.upper is None:
            return _cut(low, high, None, None)
        span = self.upper - self.lower
        return _cut(low, high, -span, span)

    def relative_interval(self, low: Any, high: Any) -> tuple[float | None, float | None, bool]:
        """An interval of a relative change (a fraction: -0.25 is -25%) cut to what it can be: a
        quantity that is never negative cannot fall by more than all of it, so the low end stops
        at -100% (no cut for a metric that can be negative; the high end is open: a baseline near
        zero allows any rise). Returns (low, high, cut)."""
        return _cut(low, high, -1.0 if self.lower is not None and self.lower >= 0 else None, None)

    def format_interval(self, low: Any, high: Any) -> str:
        """``[low, high]`` of stored values in display units, cut to the value's range and marked
        ``*`` when cut (:data:`CUT_NOTE`), or ``[no interval]``."""
        return self._interval_text(*self.value_interval(low, high))

    def format_change_interval(self, low: Any, high: Any) -> str:
        """``[low, high]`` of a difference in display units (:meth:`change_interval`)."""
        return self._interval_text(*self.change_interval(low, high))

    def _interval_text(self, low: float | None, high: float | None, cut: bool) -> str:
        if self.display(low) is None or self.display(high) is None:
            return "[no interval]"
        return f"[{self.format(low)}, {self.format(high)}]" + ("*" if cut else "")

    def format_change(self, diff: Any) -> str:
        """A signed difference of stored values in display units; a difference of percentages is
        in percentage points (``pts``)."""
        shown = self.display(diff)
        if shown is None:
            return "-"
        unit = "pts" if self.unit == "%" else self.unit
        text = f"{shown:+.4g}" if self.decimals is None else f"{shown:+.{self.decimals}f}"
        return f"{text} {unit}".rstrip()


#: The footnote of every interval marked ``*`` (:meth:`Metric.value_interval`).
CUT_NOTE = (
    "* the 95% t-interval cut at what the quantity can be (0 to 100% for a share, 0 upward for a time, rate or "
    "count; -100 to +100 pts for a change of a share; -100% upward for a relative change): the true value lies in that range, so the cut interval "
    "covers it whenever the t-interval did and keeps its 95% coverage"
)


def _cut(low: Any, high: Any, lower: float | None, upper: float | None) -> tuple[float | None, float | None, bool]:
    """(low, high) as floats cut to [lower, upper] (None bounds: open), and whether either moved;
    an end that is not a finite number is None."""

    def number(value: Any) -> float | None:
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if finite else None

    low_value, high_value = number(low), number(high)
    cut = False
    if low_value is not None and lower is not None and low_value < lower:
        low_value, cut = lower, True
    if high_value is not None and upper is not None and high_value > upper:
        high_value, cut = upper, True
    return low_value, high_value, cut


def _share(key: str, label: str) -> Metric:
    return Metric(key, f"{label} (%)", True, "%", 100.0, 1, upper=1.0)


def _seconds(key: str, label: str) -> Metric:
    return Metric(key, f"{label} (s)", False, "s", 1.0, 3)


def _milliseconds(key: str, label: str) -> Metric:
    return Metric(key, f"{label} (ms)", False, "ms", 1000.0, 1)


def _count(key: str, label: str, higher_is_better: bool = False, **kwargs: Any) -> Metric:
    return Metric(key, label, higher_is_better, "", 1.0, 0, **kwargs)


RUN_METRICS: tuple[Metric, ...] = (
    _share("slo_attainment", "SLO attainment"),
    _share("slo_attainment_by_task.chat", "SLO attainment, chat"),
    _share("slo_attainment_by_task.code", "SLO attainment, code"),
    Metric(
        "G",
        "G (1/s)",
        True,
        "1/s",
        definition="requests meeting their SLO / seconds every judged request spent in the system "
        "(eq. 2-3 of Huang et al.'s SLO-aware scheduling paper, sums over all requests): a completed request counts its E2E, a failed one is a miss that counts "
        "its time from arrival to failure; cancelled and never-sent requests are left out (schema 5; "
        "before it, failed requests were left out of both sums)",
    ),
    Metric("goodput_rps", "goodput (req/s)", True, "req/s", 1.0, 3),
    Metric("request_throughput_rps", "throughput (req/s)", True, "req/s", 1.0, 3),
    Metric("output_throughput_tps", "output throughput (tok/s)", True, "tok/s", 1.0, 1),
    _seconds("ttft_s.mean", "TTFT mean"),
    _seconds("ttft_s.p90", "TTFT p90"),
    _seconds("ttft_s.p99", "TTFT p99"),
    _milliseconds("tpot_s.mean", "TPOT mean"),
    _milliseconds("tpot_s.p90", "TPOT p90"),
    _milliseconds("tpot_s.p99", "TPOT p99"),
    _seconds("e2e_s.mean", "E2E mean"),
    _seconds("e2e_s.p90", "E2E p90"),
    _seconds("e2e_s.p99", "E2E p99"),
    _seconds("queue_s.mean", "queue mean"),
    _count("preemptions", "preemptions"),
    _count("completed", "completed requests", True),
    _count("failed", "failed requests"),
    _count("output_length_mismatches", "replies shorter than asked", real_engines_only=True),
    _count("resent_requests", "requests sent again", real_engines_only=True),
    _count("server_requests", "HTTP requests sent", real_engines_only=True),
    Metric("duration_s", "duration (s)", False, "s", 1.0, 1),
    # contention (runners.metrics.contention) describes the setting rather than the scheduler's
    # quality: no colour and no verdict (describes_setting); the direction is never read
    Metric("contention.waiting_peak", "requests waiting, peak", False, "requests", 1.0, 0, describes_setting=True),
    Metric(
        "contention.waiting_mean", "requests waiting, time-averaged", False, "requests", 1.0, 2, describes_setting=True
    ),
    Metric("contention.queued_share", "time with a queue (%)", False, "%", 100.0, 1, describes_setting=True, upper=1.0),
)

#: Detail rows of the comparison table, each placed after the RUN_METRICS key it follows.
_DETAIL_AFTER: dict[str, tuple[Metric, ...]] = {
    "output_throughput_tps": (
        Metric("input_throughput_tps", "input throughput (tok/s)", True, "tok/s", 1.0, 1),
        Metric("total_throughput_tps", "total throughput (tok/s)", True, "tok/s", 1.0, 1),
    ),
    "failed": (_count("cancelled", "cancelled requests"), _count("not_run", "requests never sent")),
    # what the workload and the engine's cache give, not the scheduler's merit: no verdict
    "preemptions": (
        Metric(
            "prefix_cache_hit_rate", "prefix cache hit rate (%)", True, "%", 100.0, 1, describes_setting=True, upper=1.0
        ),
    ),
    "ttft_s.mean": (_seconds("ttft_s.median", "TTFT median"),),
    "tpot_s.mean": (_milliseconds("tpot_s.median", "TPOT median"),),
    "tpot_s.p99": (
        _milliseconds("itl_s.mean", "ITL mean"),
        _milliseconds("itl_s.median", "ITL median"),
        _milliseconds("itl_s.p90", "ITL p90"),
        _milliseconds("itl_s.p99", "ITL p99"),
    ),
    "e2e_s.mean": (_seconds("e2e_s.median", "E2E median"),),
    "queue_s.mean": (
        _seconds("queue_s.median", "queue median"),
        _seconds("queue_s.p90", "queue p90"),
        _seconds("queue_s.p99", "queue p99"),
    ),
}
assert set(_DETAIL_AFTER) <= {entry.key for entry in RUN_METRICS}

#: The rows of the single-run comparison table (Results page): every run metric, with medians,
#: ITL, queue-time percentiles and input/total tokens per second beside them.
TABLE_METRICS: tuple[Metric, ...] = tuple(
    row for entry in RUN_METRICS for row in (entry, *_DETAIL_AFTER.get(entry.key, ()))
)

REQUEST_METRICS: tuple[Metric, ...] = (
    _seconds("ttft_s", "TTFT"),
    _milliseconds("tpot_s", "TPOT"),
    _seconds("e2e_s", "E2E latency"),
    _seconds("queue_s", "queue time"),
)

TIMESERIES_METRICS: tuple[Metric, ...] = (
    Metric("kv_usage", "KV cache used (%)", False, "%", 100.0, 1, upper=1.0),
    Metric("running", "running requests", True, "requests", 1.0, 0),
    # the in-engine scheduler's decisions (runners.engines.engine_decisions); null without one
    Metric("engine_limit", "engine running limit (requests)", True, "requests", 1.0, 0),
    Metric("engine_held_back", "held back by the engine (requests)", False, "requests", 1.0, 0),
    Metric("engine_admitted", "admitted by the engine (requests)", True, "requests", 1.0, 0),
)

#: A multi-turn run's sessions (``summary.sessions``, runners.metrics.sessions), the Results page's
#: sessions table: keys are dotted summary paths. Not in :data:`RUN_METRICS` (a run without sessions
#: has none of them, and the study statistics and the CLI tables stay as they were).
SESSION_METRICS: tuple[Metric, ...] = (
    _count("sessions.sessions", "sessions", True, describes_setting=True),
    Metric("sessions.turns_per_session_mean", "turns per session, mean", True, "turns", 1.0, 2, describes_setting=True),
    _count("sessions.completed", "sessions completed", True, definition="every turn of the session completed"),
    _count(
        "sessions.all_turns_met",
        "sessions within SLO",
        True,
        definition="every turn of the session completed and met its task's SLO",
    ),
    _share("sessions.slo_attainment", "sessions within SLO"),
)
#: The fields of one turn index's entry of ``summary.turns`` -> the run metric each is the
#: per-turn value of (same label, unit and scale: the TTFT mean of turn 2 is the run's TTFT mean
#: over its second turns); :func:`turn_metric`.
TURN_FIELDS: dict[str, str] = {
    "ttft_mean_s": "ttft_s.mean",
    "ttft_p99_s": "ttft_s.p99",
    "slo_attainment": "slo_attainment",
}
#: The turn axis of the per-turn charts and tables (1: a session's first request).
TURN_LABEL = "turn of the session (1 = first)"


#: The CLI study table's headline rows (keys of RUN_METRICS).
STUDY_HEADLINE_KEYS: tuple[str, ...] = (
    "slo_attainment",
    "G",
    "request_throughput_rps",
    "ttft_s.mean",
    "tpot_s.mean",
    "e2e_s.mean",
    "contention.waiting_peak",
)

#: Every run and request metric by key (a summary path or request column); keys are unique.
METRICS: Registry[Metric] = Registry("metric", "metric", ((m.key, m) for m in TABLE_METRICS + REQUEST_METRICS))
#: Every time-series metric by column.
TIMESERIES: Registry[Metric] = Registry("time-series metric", "metric", ((m.key, m) for m in TIMESERIES_METRICS))
_SESSIONS = {entry.key: entry for entry in SESSION_METRICS}
_BY_LABEL = {metric.label: metric for metric in TABLE_METRICS}
assert len(_BY_LABEL) == len(TABLE_METRICS), "run metric labels must be unique"


def metric(key: str) -> Metric:
    """The catalog entry of ``key`` (a summary path or request column); KeyError otherwise."""
    return METRICS[key]


def session_metric(key: str) -> Metric:
    """The :data:`SESSION_METRICS` entry of summary path ``key`` (``sessions.completed``); KeyError otherwise."""
    return _SESSIONS[key]


def turn_metric(field: str) -> Metric:
    """The catalog entry of a ``summary.turns`` field (:data:`TURN_FIELDS`: ``ttft_mean_s`` -> the
    TTFT mean's); KeyError otherwise."""
    return METRICS[TURN_FIELDS[field]]


def timeseries_metric(column: str) -> Metric:
    """The catalog entry of time-series ``column``; KeyError otherwise."""
    return TIMESERIES[column]


def metric_by_label(label: str) -> Metric | None:
    """The run metric whose display label is ``label`` (table rows carry labels), or None."""
    return _BY_LABEL.get(label)


def summary_value(summary: Any, dotted: str) -> float | None:
    """The number at ``dotted`` in a run summary (a :class:`runners.store.models.RunSummary`, or a
    mapping of the same shape: a peer's record, a study's statistics), or None when missing or not
    finite. ``input_throughput_tps`` (input tokens/s of completed requests), when not stored, is
    ``total_throughput_tps - output_throughput_tps`` (runners.metrics.run_metrics counts both over
    the run's duration)."""
    if dotted == "input_throughput_tps" and not is_stored(summary, dotted):
        total, output = summary_value(summary, "total_throughput_tps"), summary_value(summary, "output_throughput_tps")
        return None if total is None or output is None else max(total - output, 0.0)
    value = dotted_value(summary, dotted)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
