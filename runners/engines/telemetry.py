"""Engine telemetry from Prometheus ``/metrics``, parsed with ``prometheus_client``'s parser.

The names come from the engine adapters (``runners/engines/adapters/``, each adapter's
``metrics``): KV-cache usage (0-1), running and waiting requests, preemptions (counter), the TTFT
and inter-token latency histograms (seconds), and the KV capacity (vLLM's
``cache_config_info{num_gpu_blocks, block_size}``, or a gauge of the pool's tokens). Within an
engine the first name present wins (vLLM V1 names before the older ones); a page is read with the
names of the engine whose prefix it carries, so one engine's names never shadow another's.

Histograms are read as their ``_sum`` and ``_count`` (cumulative), so a mean over an interval is
the ratio of their deltas between two scrapes. vLLM V1 observes the inter-token latency once per
output token of each running request (every decode step); recent versions emit both names with
the same values (the older one deprecated), and the V1 name is read first.

Gauges with several label sets (data-parallel engines) are summed, except usage, which is averaged.
A value that is not a finite number (``NaN``, ``+Inf``) is taken as absent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from runners.engines.adapters import ADAPTERS, detect_adapter


def _names(field: str) -> tuple[str, ...]:
    return tuple(name for adapter in ADAPTERS.values() for name in getattr(adapter.metrics, field))


METRIC_FIELDS = ("kv_usage", "running", "waiting", "preemptions", "ttft", "itl", "cache_info", "kv_capacity_tokens")


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of an engine's ``/metrics``. None where the engine does not expose a quantity."""

    kind: str | None
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    preemptions: float | None = None
    ttft_sum_s: float | None = None
    ttft_count: float | None = None
    itl_sum_s: float | None = None  # inter-token latency histogram: cumulative sum (seconds) and count (tokens)
    itl_count: float | None = None
    kv_capacity_tokens: int | None = None
    block_size: int | None = None


WANTED = frozenset(name for field in METRIC_FIELDS for name in _names(field))
_SUFFIXES = ("_total", "_sum", "_count", "_info")


def _wanted(name: str) -> bool:
    if name in WANTED:
        return True
    return any(name.endswith(suffix) and name[: -len(suffix)] in WANTED for suffix in _SUFFIXES)


def relevant_lines(text: str) -> str:
    """Only the lines of the metrics we read (no histogram buckets): vLLM's page is ~50 KB and
    parsing all of it every 0.25 s would stall the client's event loop for ~10 ms each time."""
    kept = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and _wanted(parts[2]):
                kept.append(line)
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name and _wanted(name):
            kept.append(line)
    return "\n".join(kept) + "\n"


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(relevant_lines(text)):
            for sample in family.samples:
                if isinstance(sample.value, (int, float)) and math.isfinite(sample.value):
                    found.setdefault(sample.name, []).append((sample.labels, sample.value))
    except ValueError:
        raise
    except Exception as exc:  # the parser's other complaints about a malformed page
        raise ValueError(f"not Prometheus exposition format: {type(exc).__name__}: {exc}") from exc
    return found


def _first(samples: dict, names: Iterable[str], combine: str = "sum") -> float | None:
    for name in names:
        values = [value for _, value in samples.get(name, [])]
        if values:
            return sum(values) / len(values) if combine == "mean" else sum(values)
    return None


def _histogram(samples: dict, names: Iterable[str]) -> tuple[float | None, float | None]:
    """(sum, count) of the first histogram of ``names`` present (label sets summed), else (None, None)."""
    for base in names:
        if f"{base}_count" in samples:
            return _first(samples, [f"{base}_sum"]), _first(samples, [f"{base}_count"])
    return None, None


def mean_between(
    earlier_sum: float | None, earlier_count: float | None, later_sum: float | None, later_count: float | None
) -> float | None:
    """Mean of the observations a cumulative histogram took between two scrapes: the ratio of the
    deltas of its ``_sum`` and ``_count``. None when either scrape lacks it, when nothing was
    observed in between, or when the counters went backwards (the server restarted)."""
    if earlier_sum is None or earlier_count is None or later_sum is None or later_count is None:
        return None
    count = later_count - earlier_count
    total = later_sum - earlier_sum
    if count <= 0 or total < 0:
        return None
    return total / count


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus exposition text; ValueError if it is not valid exposition format."""
    samples = _samples(text)
    adapter = detect_adapter(text, None)  # the engine whose metric prefix the page carries
    if not adapter.metrics.prefix:
        return MetricsSnapshot(kind=None)
    names = adapter.metrics
    ttft_sum, ttft_count = _histogram(samples, names.ttft)
    itl_sum, itl_count = _histogram(samples, names.itl)
    capacity = block_size = None
    for name in names.cache_info:
        for labels, _ in samples.get(name, []) + samples.get(f"{name}_info", []):
            try:
                block_size = int(labels["block_size"])
                capacity = int(labels["num_gpu_blocks"]) * block_size
            except (KeyError, ValueError):
                block_size = capacity = None
                continue
            break
    if capacity is None:
        pool = _first(samples, names.kv_capacity_tokens)
        capacity = None if pool is None or pool <= 0 else int(pool)
    running = _first(samples, names.running)
    waiting = _first(samples, names.waiting)
    return MetricsSnapshot(
        kind=adapter.name,
        kv_usage=_first(samples, names.kv_usage, combine="mean"),
        running=None if running is None else int(running),
        waiting=None if waiting is None else int(waiting),
        preemptions=_first(samples, names.preemptions),
        ttft_sum_s=ttft_sum,
        ttft_count=ttft_count,
        itl_sum_s=itl_sum,
        itl_count=itl_count,
        kv_capacity_tokens=capacity,
        block_size=block_size,
    )
