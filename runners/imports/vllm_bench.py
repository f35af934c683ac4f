"""Import a vLLM ``bench serve`` result JSON (``--save-result``; per-request lists with
``--save-detailed``).

What it reads (vLLM ``vllm/benchmarks/serve.py``, checked against 0.32.0; ``burstiness`` is
``args.burstiness``, so ``--burstiness inf`` is written ``Infinity``: constant gaps; times in seconds unless the key ends in ``_ms``):

- per request, index-aligned lists: ``start_times`` (``time.perf_counter()`` when the request
  was sent), ``queue_times`` (client-side wait before sending, when written), ``ttfts`` and
  ``latencies`` (both measured from sending), ``itls`` (gaps between streamed chunks),
  ``input_lens``, ``output_lens``, ``errors`` (empty text on success);
- run level: ``duration``, ``completed``, ``failed``, ``request_rate``, ``burstiness``,
  ``date``, ``model_id`` and the ``mean_/median_/p<N>_<metric>_ms`` figures.

vLLM's TTFT, E2EL and TPOT are measured from the moment the request was sent; ours from its
arrival (release by the load generator). Arrival = start time - client queue time, so they
agree whenever the file's client queue times are zero and ours add that queue otherwise. TPOT =
(E2E - TTFT) / (output tokens - 1) in both. vLLM's ITL is every chunk gap of every request, as
ours. vLLM's throughputs divide by ``duration`` (benchmark start to end), ours by last finish -
first arrival: a definition difference, shown on the Results page.

The file records no vLLM version; pass one with ``--tool-version`` (else "version not in file").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from runners.imports.base import Definition, ImportedRun, ImportFormatError, RequestTimes, number

NAME = "vllm-bench"
TITLE = "vLLM bench serve"
DESCRIPTION = "vLLM `bench serve` result JSON (--save-result; per-request lists with --save-detailed)"
DETAIL_KEYS = ("start_times", "ttfts", "itls", "latencies", "input_lens", "output_lens")
RUN_KEYS = ("duration", "completed", "request_throughput")
#: vLLM's run-level latency names -> ours (summary distribution keys)
METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s", "itl": "itl_s"}
STATISTICS = {"mean": "mean", "median": "median", "p90": "p90", "p99": "p99"}


def sniff(data: Any) -> str | None:
    """None when ``data`` (parsed JSON) is a vLLM bench serve result, else what is missing."""
    if not isinstance(data, dict):
        return f"expected a JSON object with {', '.join(RUN_KEYS)}; found {type(data).__name__}"
    missing = [key for key in RUN_KEYS if key not in data]
    if missing:
        return f"no {', '.join(missing)} key(s) at the top level"
    return None


def parse(path: Path, data: dict[str, Any], tool_version: str | None = None) -> list[ImportedRun]:
    """The one run in a vLLM bench serve result."""
    version = tool_version or _text(data.get("vllm_version")) or _text(data.get("version"))
    queue_known = data.get("max_concurrency") is None
    run = ImportedRun(
        tool=NAME,
        tool_name=TITLE,
        tool_version=version,
        workload=_workload(data),
        requests=[],
        arrival_process=_arrival(data),
        arrival_rate_rps=number(data.get("request_rate")),
        started_at_unix_s=_date(data.get("date")),
        model=_text(data.get("model_id")),
        tool_summary={key: value for key, value in data.items() if not isinstance(value, list)},
    )
    if version is None:
        run.notes.append("the file records no vLLM version")
    detailed = [key for key in DETAIL_KEYS if key in data]
    if detailed and len(detailed) < len(DETAIL_KEYS):
        missing = sorted(set(DETAIL_KEYS) - set(detailed))
        raise ImportFormatError(
            f"{path}: vLLM bench serve file with per-request lists {', '.join(detailed)} but "
            f"without {', '.join(missing)}; expected all of {', '.join(DETAIL_KEYS)} "
            "(--save-detailed) or none"
        )
    if detailed:
        run.requests = _requests(path, data)
    else:
        run.notes.append("no per-request lists (run without --save-detailed): run-level figures only")
        for key in ("completed", "failed"):
            if isinstance(data.get(key), int):
                run.mapped[key] = data[key]
        if queue_known:  # without a client-side queue, their "from sending" is our "from arrival"
            for theirs, ours in METRICS.items():
                for statistic, our_statistic in STATISTICS.items():
                    value = number(data.get(f"{statistic}_{theirs}_ms"))
                    if value is not None:
                        run.mapped[f"{ours}.{our_statistic}"] = value / 1000.0
    for theirs, ours in (
        ("request_throughput", "request_throughput_rps"),
        ("output_throughput", "output_throughput_tps"),
        ("total_token_throughput", "total_throughput_tps"),
    ):
        run.definitions.append(
            Definition(
                ours,
                theirs,
                number(data.get(theirs)),
                "vLLM divides by the benchmark's duration (its start to its end); "
                "schedlab by last finish - first arrival",
            )
        )
    lag = _mean_queue_ms(data.get("queue_times"))
    if not queue_known:
        why = "after --max-concurrency's client queue"
    elif lag is not None:
        why = f"its own send lag, queue_times, is in ours: {lag:.2f} ms on average in this file"
    else:
        why = "any send lag of its client is in ours"
    for ours, theirs in (("ttft_s", "ttft"), ("e2e_s", "e2el")):
        run.definitions.append(
            Definition(
                ours,
                theirs,
                _ms(data.get(f"mean_{theirs}_ms")),
                f"vLLM measures {theirs.upper()} from sending; schedlab from the scheduled arrival ({why})",
            )
        )
    return [run]


def _mean_queue_ms(values: Any) -> float | None:
    """Mean of vLLM's ``queue_times`` (seconds each: scheduled arrival to sending), in ms; None
    when the file has none or they are not all finite numbers."""
    if not isinstance(values, list) or not values:
        return None
    numbers = [number(value) for value in values]
    if any(value is None for value in numbers):
        return None
    return 1000.0 * sum(value for value in numbers if value is not None) / len(numbers)


def _requests(path: Path, data: dict[str, Any]) -> list[RequestTimes]:
    lists = {key: data[key] for key in DETAIL_KEYS}
    optional = {key: data.get(key) for key in ("queue_times", "errors") if isinstance(data.get(key), list)}
    count = len(lists["start_times"]) if isinstance(lists["start_times"], list) else -1
    for key, value in {**lists, **optional}.items():
        if not isinstance(value, list) or len(value) != count:
            shown = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
            raise ImportFormatError(
                f"{path}: vLLM bench serve per-request list {key!r} has {shown}; expected a list "
                f"of {count} entries like start_times"
            )
    if count == 0:
        raise ImportFormatError(f"{path}: vLLM bench serve file with no requests (start_times is empty)")
    queue = optional.get("queue_times") or [0.0] * count
    errors = optional.get("errors") or [""] * count
    starts = [_field(path, "start_times", i, lists["start_times"][i]) for i in range(count)]
    queues = [_field(path, "queue_times", i, queue[i]) for i in range(count)]
    origin = min(start - wait for start, wait in zip(starts, queues))
    requests = []
    for i in range(count):
        error = errors[i] if isinstance(errors[i], str) and errors[i] else None
        sent = starts[i] - origin
        gaps = lists["itls"][i]
        if not isinstance(gaps, list) or not all(number(gap) is not None for gap in gaps):
            raise ImportFormatError(f"{path}: itls[{i}] is not a list of numbers (seconds)")
        ttft = _field(path, "ttfts", i, lists["ttfts"][i])
        latency = _field(path, "latencies", i, lists["latencies"][i])
        requests.append(
            RequestTimes(
                request_id=str(i),
                arrival_s=sent - queues[i],
                sent_s=sent,
                first_token_s=None if error else sent + ttft,
                finish_s=sent + latency,
                input_tokens=int(_field(path, "input_lens", i, lists["input_lens"][i])),
                output_tokens=int(_field(path, "output_lens", i, lists["output_lens"][i])),
                itl_s=[float(gap) for gap in gaps],
                error=error,
            )
        )
    return requests


def _field(path: Path, key: str, index: int, value: Any) -> float:
    shown = number(value)
    if shown is None:
        raise ImportFormatError(f"{path}: {key}[{index}] is {json.dumps(value)[:40]}; expected a number")
    return shown


def _ms(value: Any) -> float | None:
    shown = number(value)
    return None if shown is None else shown / 1000.0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _date(value: Any) -> float | None:
    """vLLM's ``date`` (``YYYYmmdd-HHMMSS``, the benchmarking machine's local time) as Unix
    seconds, read as this machine's local time; None when absent or malformed."""
    try:
        return time.mktime(time.strptime(value, "%Y%m%d-%H%M%S"))
    except (TypeError, ValueError, OverflowError):
        return None


def _arrival(data: dict[str, Any]) -> str | None:
    rate = data.get("request_rate")
    if rate in ("inf", None) or (isinstance(rate, float) and rate == float("inf")):
        return "all-at-once"
    raw = data.get("burstiness")
    if raw == "inf" or (isinstance(raw, float) and raw == float("inf")):
        return "constant"  # vLLM's gamma gaps with infinite burstiness: every gap exactly 1 / rate (Python's json reads Infinity)
    burstiness = number(raw)
    return "poisson" if burstiness in (None, 1.0) else "gamma"


def _workload(data: dict[str, Any]) -> str:
    lens = data.get("input_lens")
    prompts = data.get("num_prompts")
    text = f"vLLM bench serve: {prompts} prompts" if prompts is not None else "vLLM bench serve"
    if isinstance(lens, list) and lens and all(number(x) is not None for x in lens):
        text += f", mean prompt {sum(lens) / len(lens):.0f} tokens"
    return text
