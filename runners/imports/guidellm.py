"""Import a GuideLLM ``benchmarks.json`` (``guidellm run --output kind=json``; report schema
``metadata.version`` 2, GuideLLM 0.8): one schedlab run per benchmark in the file.

What it reads (GuideLLM ``guidellm/benchmark/schemas``; Unix seconds unless the name ends in
``_ms``):

- ``metadata.guidellm_version``; per benchmark ``config.strategy`` (type and rate),
  ``config.backend`` (model, target), ``metrics.request_totals``, ``start_time``;
- per request, in ``requests.successful``, ``requests.errored`` and ``requests.incomplete``:
  ``info.timings.targeted_start`` (when the strategy meant to send it: our arrival),
  ``info.timings.request_start`` (sent), ``first_token_iteration`` and
  ``last_token_iteration`` (first and last streamed token), ``prompt_tokens``,
  ``output_tokens``, ``info.error``.

Definitions that differ from ours (kept beside ours, shown on the Results page):

- GuideLLM's ``time_per_output_token_ms`` = (last token - request start) / output tokens:
  it includes the first token's wait; ours (and vLLM's) excludes it: (E2E - TTFT) / (n - 1).
  GuideLLM's ``inter_token_latency_ms`` = (last - first token) / (n - 1) is our TPOT, except
  that its distributions weight every request by its token count.
- GuideLLM's TTFT and request latency start at ``request_start`` (sent); ours at the targeted
  start (arrival), so they also count the strategy's dispatch delay; its latency ends at the
  response's end, ours at the last token.

A benchmark's ``requests`` may be a sample (``config.sample_size``); the import then says how
many of ``request_totals`` it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.imports.base import Definition, ImportedRun, ImportFormatError, RequestTimes, number

# runners.json_values (pydantic) and runners.metrics.outcomes (pandas) are imported where used, so
# listing the importers (`import --help`) loads neither

NAME = "guidellm"
TITLE = "GuideLLM"
DESCRIPTION = "GuideLLM benchmarks.json (guidellm run --output kind=json), one run per benchmark"
STATUSES = ("successful", "errored", "incomplete")
#: GuideLLM's strategy type -> our arrival process (looked up with the file's raw JSON value)
ARRIVAL_PROCESSES: dict[Any, str | None] = {
    "constant": "constant",
    "poisson": "poisson",
    "synchronous": None,
    "throughput": "all-at-once",
}


def sniff(data: Any) -> str | None:
    """None when ``data`` (parsed JSON) is a GuideLLM report, else what is missing."""
    if not isinstance(data, dict):
        return f"expected a JSON object with 'benchmarks'; found {type(data).__name__}"
    if not isinstance(data.get("benchmarks"), list):
        return "no 'benchmarks' list at the top level"
    metadata = data.get("metadata")
    if not isinstance(metadata, dict) or "guidellm_version" not in metadata:
        return "no metadata.guidellm_version (GuideLLM 0.4 or later writes it)"
    return None


def parse(path: Path, data: dict[str, Any], tool_version: str | None = None) -> list[ImportedRun]:
    """One run per benchmark of a GuideLLM report."""
    version = tool_version or str(data["metadata"].get("guidellm_version") or "") or None
    benchmarks = data["benchmarks"]
    if not benchmarks:
        raise ImportFormatError(f"{path}: GuideLLM report with no benchmarks; expected at least one in 'benchmarks'")
    return [_benchmark(path, index, benchmark, version, len(benchmarks)) for index, benchmark in enumerate(benchmarks)]


def _benchmark(path: Path, index: int, benchmark: Any, version: str | None, count: int) -> ImportedRun:
    from runners.json_values import as_dict

    where = f"{path}: benchmarks[{index}]"
    if not isinstance(benchmark, dict) or not isinstance(benchmark.get("requests"), dict):
        raise ImportFormatError(
            f"{where} has no 'requests' object; expected GuideLLM's per-request statistics "
            "(successful, errored, incomplete)"
        )
    config = as_dict(benchmark.get("config"))
    strategy = as_dict(config.get("strategy"))
    backend = as_dict(config.get("backend"))
    kind = strategy.get("type_")
    rate = number(strategy.get("rate"))
    stats: list[tuple[str, dict[str, Any]]] = []
    for status in STATUSES:
        entries = benchmark["requests"].get(status) or []
        if not isinstance(entries, list):
            raise ImportFormatError(f"{where}.requests.{status} is {type(entries).__name__}; expected a list")
        stats.extend((status, entry) for entry in entries)
    if not stats:
        raise ImportFormatError(f"{where} holds no requests in requests.successful/errored/incomplete")
    times = [_times(where, number_, status, entry) for number_, (status, entry) in enumerate(stats)]
    origin = min(t["arrival"] for t in times)
    requests = [
        RequestTimes(
            request_id=t["id"],
            arrival_s=t["arrival"] - origin,
            sent_s=t["sent"] - origin,
            first_token_s=None if t["first"] is None else t["first"] - origin,
            finish_s=None if t["last"] is None else t["last"] - origin,
            input_tokens=t["input"],
            output_tokens=t["output"],
            itl_s=None,
            error=t["error"],
        )
        for t in times
    ]
    label = f"{kind}@{rate:g}" if kind and rate is not None else (kind or "benchmark")
    run = ImportedRun(
        tool=NAME,
        tool_name=TITLE,
        tool_version=version,
        requests=requests,
        workload=f"GuideLLM benchmark {index + 1} of {count} ({label})",
        benchmark=index,
        arrival_process=ARRIVAL_PROCESSES.get(kind),
        arrival_rate_rps=rate,
        started_at_unix_s=number(benchmark.get("start_time")),
        model=backend.get("model") if isinstance(backend.get("model"), str) else None,
        target=backend.get("target") if isinstance(backend.get("target"), str) else None,
        tool_summary={
            "strategy": strategy,
            "duration": benchmark.get("duration"),
            "request_totals": as_dict(benchmark.get("metrics")).get("request_totals"),
        },
    )
    metrics = as_dict(benchmark.get("metrics"))
    run.definitions += [
        Definition(
            "tpot_s",
            "time_per_output_token_ms",
            _mean_ms(metrics, "time_per_output_token_ms"),
            "GuideLLM's time per output token includes the first token: (last token - request start) / "
            "output tokens, weighted by tokens; schedlab's TPOT excludes it: (E2E - TTFT) / (n - 1)",
        ),
        Definition(
            "tpot_s",
            "inter_token_latency_ms",
            _mean_ms(metrics, "inter_token_latency_ms"),
            "GuideLLM's inter-token latency, (last - first token) / (n - 1), is schedlab's TPOT, but its "
            "mean weights each request by its output tokens",
        ),
        Definition(
            "ttft_s",
            "time_to_first_token_ms",
            _mean_ms(metrics, "time_to_first_token_ms"),
            "GuideLLM measures TTFT from sending (request_start); schedlab from the targeted start "
            "(arrival), so ours adds GuideLLM's dispatch delay",
        ),
        Definition(
            "e2e_s",
            "request_latency",
            _mean(metrics, "request_latency"),
            "GuideLLM's request latency runs from sending to the response's end; schedlab's E2E from "
            "arrival to the last token",
        ),
    ]
    totals = as_dict(metrics.get("request_totals"))
    total = totals.get("total")
    if isinstance(total, int) and total != len(requests):
        run.notes.append(
            f"the file holds {len(requests)} of the benchmark's {total} requests (GuideLLM sampled "
            "them); schedlab's figures are over those"
        )
    return run


def _times(where: str, index: int, status: str, entry: Any) -> dict[str, Any]:
    """Times (Unix seconds) and counts of one GuideLLM request statistic."""
    from runners.json_values import as_dict
    from runners.metrics.outcomes import CANCELLED

    info = as_dict(entry.get("info")) if isinstance(entry, dict) else {}
    timings = info.get("timings")
    if not isinstance(timings, dict):
        raise ImportFormatError(
            f"{where}.requests.{status}: entry {index} has no info.timings; expected GuideLLM's "
            "request timings (targeted_start, request_start, first_token_iteration, ...)"
        )
    sent = number(timings.get("request_start"))
    arrival = number(timings.get("targeted_start"))
    if arrival is None:
        arrival = sent
    if arrival is None:
        raise ImportFormatError(
            f"{where}.requests.{status}: entry {index} has neither targeted_start nor "
            "request_start; expected Unix seconds"
        )
    error = None
    if status != "successful":
        # GuideLLM's incomplete requests were in flight when the benchmark ended: cancelled, not failed
        error = CANCELLED if status == "incomplete" else str(info.get("error") or "errored")
    first = number(timings.get("first_token_iteration"))
    last = number(timings.get("last_token_iteration"))
    if status == "successful" and (first is None or last is None):
        raise ImportFormatError(
            f"{where}.requests.successful: entry {index} has no first_token_iteration or "
            "last_token_iteration; expected a streamed request's token times"
        )
    return {
        "id": str(entry.get("request_id") or index),
        "arrival": arrival,
        "sent": sent if sent is not None else arrival,
        "first": first,
        "last": last if error is None else number(timings.get("request_end")) or last,
        "input": int(number(entry.get("prompt_tokens")) or 0),
        "output": int(number(entry.get("output_tokens")) or 0),
        "error": error,
    }


def _mean(metrics: dict[str, Any], name: str) -> float | None:
    from runners.json_values import as_dict

    return number(as_dict(as_dict(metrics.get(name)).get("successful")).get("mean"))


def _mean_ms(metrics: dict[str, Any], name: str) -> float | None:
    value = _mean(metrics, name)
    return None if value is None else value / 1000.0
