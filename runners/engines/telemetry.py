"""Engine telemetry from Prometheus ``/metrics``, parsed with ``prometheus_client``'s parser.

The names come from the engine adapters (``runners/engines/adapters/``, each adapter's
``metrics``): KV-cache usage (0-1), running and waiting requests (waiting: the engine's gauge plus
any ``waiting_extra`` gauges, LMDeploy's API-layer queue), preemptions (counter), the TTFT
and inter-token latency histograms (seconds), and the KV capacity (vLLM's
``cache_config_info{num_gpu_blocks, block_size}``, or a gauge of the pool's tokens). Within an
engine the first name present wins (vLLM V1 names before the older ones); a page is read with the
names of the engine whose prefix it carries, so one engine's names never shadow another's.

Histograms are read as their ``_sum`` and ``_count`` (cumulative), so a mean over an interval is
the ratio of their deltas between two scrapes. vLLM V1 observes the inter-token latency once per
output token of each running request (every decode step); recent versions emit both names with
the same values (the older one deprecated), and the V1 name is read first.

Gauges with several label sets (data-parallel engines) are summed, except usage, which is averaged.
A sample that is not a finite number (``NaN``, ``+Inf``) or lies outside what the quantity can be
(negative, above :data:`MAX_SAMPLE_VALUE`, a usage above 1, a count of requests above
:data:`MAX_REQUESTS`) is dropped, taken as absent, and counted (``MetricsSnapshot.dropped``), so
a hostile page can neither crash the run's writer nor skew what a policy reads. A page is read
only up to :data:`METRICS_MAX_BYTES` (a bigger one is a failed scrape, :class:`MetricsTooLarge`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from runners.engines.adapters import ADAPTERS, detect_adapter
from runners.engines.adapters.base import MetricNames


@dataclass
class TelemetryCounts:
    """What a run's ``/metrics`` scrapes brought, for the summary's ``telemetry``: scrapes tried,
    those that failed (no answer in :data:`SCRAPE_TIMEOUT_S`, an HTTP error, not exposition
    format), those refused as longer than :data:`METRICS_MAX_BYTES`, and samples dropped as not
    finite or out of range."""

    scrapes: int = 0
    failed: int = 0
    too_large: int = 0
    samples_dropped: int = 0

    def record(self, snapshot: "MetricsSnapshot | None", error: BaseException | None = None) -> None:
        """Count one scrape: its snapshot, or None with the ``error`` that ended it."""
        self.scrapes += 1
        if snapshot is not None:
            self.samples_dropped += snapshot.dropped
        elif isinstance(error, MetricsTooLarge):
            self.too_large += 1
        else:
            self.failed += 1

    def as_record(self) -> dict[str, int]:
        return {
            "scrapes": self.scrapes,
            "failed": self.failed,
            "too_large": self.too_large,
            "samples_dropped": self.samples_dropped,
        }


def _names(field: str) -> tuple[str, ...]:
    return tuple(name for adapter in ADAPTERS.values() for name in getattr(adapter.metrics, field))


#: Largest ``/metrics`` page read, bytes (vLLM's is ~50 kB; one with many label sets a few hundred kB).
METRICS_MAX_BYTES = 4 * 2**20
#: Longest a scrape may take, seconds (connect, answer and body): a slower one counts as failed.
SCRAPE_TIMEOUT_S = 5.0
#: Largest value any sample we read may have: counters and histogram sums are exact in a double
#: up to 2**53 and are written to int64 / float64 columns.
MAX_SAMPLE_VALUE = float(2**53)
#: Largest running or waiting request count believed.
MAX_REQUESTS = 2**31 - 1


class MetricsTooLarge(ValueError):
    """A ``/metrics`` page longer than :data:`METRICS_MAX_BYTES`."""

    def __init__(self, size: int | None = None) -> None:
        shown = f"{size:,} bytes" if size is not None else f"more than {METRICS_MAX_BYTES:,} bytes"
        super().__init__(f"/metrics page of {shown}; at most {METRICS_MAX_BYTES:,} are read")


METRIC_FIELDS = (
    "kv_usage",
    "running",
    "waiting",
    "waiting_extra",
    "preemptions",
    "ttft",
    "itl",
    "cache_info",
    "kv_capacity_tokens",
    "prefix_queries",
    "prefix_hits",
)


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
    prefix_caching: bool | None = None  # the cache info's enable_prefix_caching label, where it has one
    prefix_queries: float | None = None  # the prefix cache's cumulative counters, tokens
    prefix_hits: float | None = None
    dropped: int = 0  # samples of the page that were not finite or out of range, and were ignored


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


def _in_range(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= MAX_SAMPLE_VALUE
    )


def _samples(text: str) -> tuple[dict[str, list[tuple[dict[str, str], float]]], int]:
    """The samples of the metrics we read, by name, and how many were dropped as not finite or
    out of range."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    dropped = 0
    try:
        for family in text_string_to_metric_families(relevant_lines(text)):
            for sample in family.samples:
                if _in_range(sample.value):
                    found.setdefault(sample.name, []).append((sample.labels, sample.value))
                else:
                    dropped += 1
    except ValueError:
        raise
    except Exception as exc:  # the parser's other complaints about a malformed page
        raise ValueError(f"not Prometheus exposition format: {type(exc).__name__}: {exc}") from exc
    return found, dropped


def _first(samples: dict, names: Iterable[str], combine: str = "sum") -> float | None:
    for name in names:
        values = [value for _, value in samples.get(name, [])]
        if values:
            return sum(values) / len(values) if combine == "mean" else sum(values)
    return None


def _waiting(samples: dict, names: MetricNames) -> float | None:
    """The engine's waiting count: the first ``waiting`` gauge present plus every
    ``waiting_extra`` gauge present (LMDeploy's ``num_api_requests_waiting``); None when none is."""
    parts = [_first(samples, names.waiting)] + [_first(samples, [name]) for name in names.waiting_extra]
    present = [part for part in parts if part is not None]
    return sum(present) if present else None


def _histogram(samples: dict, names: Iterable[str]) -> tuple[float | None, float | None]:
    """(sum, count) of the first histogram of ``names`` present (label sets summed), else (None, None)."""
    for base in names:
        if f"{base}_count" in samples:
            return _first(samples, [f"{base}_sum"]), _first(samples, [f"{base}_count"])
    return None, None


async def read_metrics_page(
    session: Any, url: str, headers: dict[str, str] | None = None, timeout_s: float = SCRAPE_TIMEOUT_S
) -> str | None:
    """The text of ``GET url`` on an aiohttp ``session`` within ``timeout_s`` seconds (connect,
    answer and body), or None when the answer is not HTTP 200; :class:`MetricsTooLarge` past
    :data:`METRICS_MAX_BYTES` (read no further), TimeoutError or aiohttp.ClientError otherwise."""
    import aiohttp

    async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        if response.status != 200:
            return None
        if response.content_length is not None and response.content_length > METRICS_MAX_BYTES:
            raise MetricsTooLarge(response.content_length)
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > METRICS_MAX_BYTES:
                raise MetricsTooLarge()
        return body.decode(response.get_encoding() if response.charset else "utf-8", errors="replace")


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
    if len(text) > METRICS_MAX_BYTES:
        raise MetricsTooLarge(len(text))
    samples, dropped = _samples(text)
    adapter = detect_adapter(text, None)  # the engine whose metric prefix the page carries
    if not adapter.metrics.prefix:
        return MetricsSnapshot(kind=None, dropped=dropped)
    names = adapter.metrics
    ttft_sum, ttft_count = _histogram(samples, names.ttft)
    itl_sum, itl_count = _histogram(samples, names.itl)
    capacity = block_size = None
    prefix_caching: bool | None = None
    for name in names.cache_info:
        for labels, _ in samples.get(name, []) + samples.get(f"{name}_info", []):
            flag = labels.get("enable_prefix_caching")
            prefix_caching = {"True": True, "False": False}.get(flag) if isinstance(flag, str) else None
            try:
                block_size = int(labels["block_size"])
                capacity = int(labels["num_gpu_blocks"]) * block_size
            except (KeyError, ValueError):
                block_size = capacity = None
                continue
            if not (0 < block_size <= MAX_SAMPLE_VALUE and 0 < capacity <= MAX_SAMPLE_VALUE):
                dropped += 1
                block_size = capacity = None
                continue
            break
    if capacity is None:
        pool = _first(samples, names.kv_capacity_tokens)
        capacity = None if pool is None or pool <= 0 else int(pool)

    def bounded(value: float | None, largest: float) -> float | None:
        nonlocal dropped
        if value is not None and value > largest:  # a sum of label sets past what can be
            dropped += 1
            return None
        return value

    running = bounded(_first(samples, names.running), MAX_REQUESTS)
    waiting = bounded(_waiting(samples, names), MAX_REQUESTS)
    preemptions = bounded(_first(samples, names.preemptions), MAX_SAMPLE_VALUE)
    return MetricsSnapshot(
        kind=adapter.name,
        kv_usage=bounded(_first(samples, names.kv_usage, combine="mean"), 1.0),
        running=None if running is None else int(running),
        waiting=None if waiting is None else int(waiting),
        preemptions=preemptions,
        ttft_sum_s=bounded(ttft_sum, MAX_SAMPLE_VALUE),
        ttft_count=bounded(ttft_count, MAX_SAMPLE_VALUE),
        itl_sum_s=bounded(itl_sum, MAX_SAMPLE_VALUE),
        itl_count=bounded(itl_count, MAX_SAMPLE_VALUE),
        kv_capacity_tokens=capacity,
        block_size=block_size,
        prefix_caching=prefix_caching,
        prefix_queries=bounded(_first(samples, names.prefix_queries), MAX_SAMPLE_VALUE),
        prefix_hits=bounded(_first(samples, names.prefix_hits), MAX_SAMPLE_VALUE),
        dropped=dropped,
    )
