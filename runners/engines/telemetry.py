"""Engine telemetry from Prometheus ``/metrics``, parsed with ``prometheus_client``'s parser.

Names understood (the first one present wins):

| quantity | vLLM V1 | older vLLM | LMDeploy |
|---|---|---|---|
| KV-cache usage, 0-1 | vllm:kv_cache_usage_perc | vllm:gpu_cache_usage_perc | lmdeploy:gpu_cache_usage_perc |
| running requests | vllm:num_requests_running | (same) | lmdeploy:num_requests_running |
| waiting requests | vllm:num_requests_waiting | (same) | lmdeploy:num_requests_waiting |
| preemptions (counter) | vllm:num_preemptions_total | vllm:num_preemptions_total | - |
| TTFT histogram, s | vllm:time_to_first_token_seconds | (same) | lmdeploy:time_to_first_token_seconds |
| inter-token latency histogram, s | vllm:inter_token_latency_seconds | vllm:time_per_output_token_seconds | - |
| KV capacity | vllm:cache_config_info{num_gpu_blocks, block_size} | (same) | - |

Histograms are read as their ``_sum`` and ``_count`` (cumulative), so a mean over an interval is
the ratio of their deltas between two scrapes. vLLM V1 observes the inter-token latency once per
output token of each running request (every decode step); recent versions emit both names with
the same values (the older one deprecated), and the V1 name is read first.

Gauges with several label sets (data-parallel engines) are summed, except usage, which is averaged.
A value that is not a finite number (``NaN``, ``+Inf``) is taken as absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "lmdeploy:gpu_cache_usage_perc")
RUNNING = ("vllm:num_requests_running", "lmdeploy:num_requests_running")
WAITING = ("vllm:num_requests_waiting", "lmdeploy:num_requests_waiting")
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
TTFT = ("vllm:time_to_first_token_seconds", "lmdeploy:time_to_first_token_seconds")
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
CACHE_INFO = ("vllm:cache_config_info",)


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


WANTED = frozenset(KV_USAGE + RUNNING + WAITING + PREEMPTIONS + TTFT + ITL + CACHE_INFO + ("vllm:num_preemptions",))
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


def mean_between(earlier_sum: float | None, earlier_count: float | None, later_sum: float | None,
                 later_count: float | None) -> float | None:
    """Mean of the observations a cumulative histogram took between two scrapes: the ratio of the
    deltas of its ``_sum`` and ``_count``. None when either scrape lacks it, when nothing was
    observed in between, or when the counters went backwards (the server restarted)."""
    if None in (earlier_sum, earlier_count, later_sum, later_count):
        return None
    count = later_count - earlier_count
    total = later_sum - earlier_sum
    if count <= 0 or total < 0:
        return None
    return total / count


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus exposition text; ValueError if it is not valid exposition format."""
    samples = _samples(text)
    kind = "vllm" if "vllm:" in text else "lmdeploy" if "lmdeploy:" in text else None
    ttft_sum, ttft_count = _histogram(samples, TTFT)
    itl_sum, itl_count = _histogram(samples, ITL)
    capacity = block_size = None
    for name in CACHE_INFO:
        for labels, _ in samples.get(name, []) + samples.get(f"{name}_info", []):
            try:
                block_size = int(labels["block_size"])
                capacity = int(labels["num_gpu_blocks"]) * block_size
            except (KeyError, ValueError):
                block_size = capacity = None
                continue
            break
    running = _first(samples, RUNNING)
    waiting = _first(samples, WAITING)
    return MetricsSnapshot(
        kind=kind,
        kv_usage=_first(samples, KV_USAGE, combine="mean"),
        running=None if running is None else int(running),
        waiting=None if waiting is None else int(waiting),
        preemptions=_first(samples, PREEMPTIONS),
        ttft_sum_s=ttft_sum,
        ttft_count=ttft_count,
        itl_sum_s=itl_sum,
        itl_count=itl_count,
        kv_capacity_tokens=capacity,
        block_size=block_size,
    )
