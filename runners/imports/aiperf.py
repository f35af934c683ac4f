"""Import AIPerf results: the per-request ``profile_export.jsonl`` and the aggregate
``profile_export_aiperf.json`` (AIPerf 0.13, export schema 1.4).

Per-request records (one JSON object a line: ``metadata``, ``metrics`` as
``{"value": ..., "unit": ...}``, ``error`` when it failed): ``metadata.credit_issued_ns``
(when AIPerf's timing manager released the request: our arrival), ``request_start_ns`` (sent),
``metrics.time_to_first_token`` and ``request_latency`` (ms, from sending),
``inter_chunk_latency`` (ms, the gaps between streamed chunks), ``input_sequence_length``, and
output tokens: the server's ``usage_completion_tokens`` when present, else AIPerf's
``output_sequence_length``. Records of phases other than ``profiling`` (warm-up) are skipped.

The aggregate file has run-level figures only (``avg``/``p50``/``p90``/``p99`` per metric, with
units). They are mapped to ours where the quantity is ours, and each mapped latency is listed as
a definition difference where it is one.

Definitions that differ from ours (shown on the Results page):

- AIPerf's ``inter_token_latency`` = (request latency - TTFT) / (output_sequence_length - 1) is
  what vLLM and schedlab call TPOT; but AIPerf counts output tokens by re-tokenizing the reply
  text on the client, schedlab takes the server's count, so the two differ when they disagree.
- AIPerf's TTFT and request latency run from sending; ours from the credit's issue (arrival),
  which adds AIPerf's ``credit_to_start_latency``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from runners.imports.base import Definition, ImportedRun, ImportFormatError, RequestTimes, number

# runners.json_values (pydantic) is imported where used, so listing the importers (`import --help`) does not load it

NAME = "aiperf"
RECORDS_NAME = "aiperf-records"
TITLE = "AIPerf"
DESCRIPTION = "AIPerf profile_export_aiperf.json (aggregate, run-level figures only)"
RECORDS_DESCRIPTION = "AIPerf profile_export.jsonl (one record per request)"
AGGREGATE_FILE = "profile_export_aiperf.json"
#: AIPerf aggregate metric -> our summary distribution key, and the unit AIPerf writes it in
LATENCIES = {"time_to_first_token": "ttft_s", "inter_token_latency": "tpot_s", "request_latency": "e2e_s"}
#: AIPerf's phase type -> our arrival process (looked up with the file's raw JSON value)
ARRIVAL_PROCESSES: dict[Any, str] = {"poisson": "poisson", "constant": "constant"}
STATISTICS = {"avg": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
#: looked up with whatever JSON value a file holds as the unit, hence the Any key
UNITS_TO_SECONDS: dict[Any, float] = {"ms": 1e-3, "sec": 1.0, "s": 1.0, "us": 1e-6, "ns": 1e-9}


# -- the aggregate file ---------------------------------------------------------------------
def sniff(data: Any) -> str | None:
    """None when ``data`` (parsed JSON) is an AIPerf aggregate export, else what is missing."""
    if not isinstance(data, dict):
        return f"expected a JSON object with aiperf_version; found {type(data).__name__}"
    if "aiperf_version" not in data and not isinstance(data.get("request_throughput"), dict):
        return "no aiperf_version key at the top level"
    return None


def parse(path: Path, data: dict[str, Any], tool_version: str | None = None) -> list[ImportedRun]:
    """The run of an aggregate export: run-level figures only, mapped where they are ours."""
    from runners.json_values import as_dict

    run = _aggregate_run(data, tool_version, [])
    run.notes.append("aggregate file only: run-level figures; import profile_export.jsonl for per-request data")
    figures = 0
    for theirs, ours in LATENCIES.items():
        entry = data.get(theirs)
        scale = _scale(path, theirs, entry)
        if scale is None or not isinstance(entry, dict):  # _scale refused any other non-None entry
            continue
        for statistic, our_statistic in STATISTICS.items():
            value = number(entry.get(statistic))
            if value is not None:
                run.mapped[f"{ours}.{our_statistic}"] = value * scale
                figures += 1
    counts = {"request_count": "requests", "completed_request_count": "completed"}
    for theirs, ours in counts.items():
        value = number(as_dict(data.get(theirs)).get("avg"))
        if value is not None:
            run.mapped[ours] = int(value)
    if figures == 0 and not run.mapped:
        raise ImportFormatError(
            f"{path}: AIPerf aggregate file without time_to_first_token, inter_token_latency, "
            "request_latency or request_count; expected AIPerf's profile_export_aiperf.json"
        )
    return [run]


def _aggregate_run(data: dict[str, Any], tool_version: str | None, requests: list[RequestTimes]) -> ImportedRun:
    from runners.json_values import as_dict, as_list

    config = as_dict(data.get("input_config"))
    phases = as_list(config.get("phases"))
    rate, process = None, None
    for phase in phases:  # the profiling phase's load: {"kind": "profiling", "type": "poisson", "rate": 3.0}
        if isinstance(phase, dict) and phase.get("kind") == "profiling":
            rate = number(phase.get("rate"))
            process = ARRIVAL_PROCESSES.get(phase.get("type"))
    models = as_list(as_dict(config.get("models")).get("items")) or [{}]
    endpoint = as_dict(config.get("endpoint"))
    run = ImportedRun(
        tool=NAME,
        tool_name=TITLE,
        tool_version=tool_version or _text(data.get("aiperf_version")),
        workload=_workload(config),
        requests=requests,
        arrival_rate_rps=rate,
        arrival_process=process,
        started_at_unix_s=_iso(data.get("start_time")),
        model=_text(as_dict(models[0]).get("name")),
        target=", ".join(url for url in as_list(endpoint.get("urls")) if isinstance(url, str)) or None,
        tool_summary={key: value for key, value in data.items() if isinstance(value, dict) and "unit" in value}
        if data
        else {},
    )
    credit = data.get("credit_to_start_latency")
    credit_s = _mean_seconds(credit)
    run.definitions += [
        Definition(
            "tpot_s",
            "inter_token_latency",
            _mean_seconds(data.get("inter_token_latency")),
            "AIPerf's inter-token latency is schedlab's (and vLLM's) TPOT, (latency - TTFT) / (n - 1), but "
            "AIPerf counts n by re-tokenizing the reply on the client; schedlab takes the server's count",
        ),
        Definition(
            "ttft_s",
            "time_to_first_token",
            _mean_seconds(data.get("time_to_first_token")),
            "AIPerf measures TTFT from sending; schedlab from arrival (credit issued), which adds AIPerf's "
            "credit_to_start_latency" + (f" (mean {credit_s * 1000:.3g} ms here)" if credit_s is not None else ""),
        ),
        Definition(
            "e2e_s",
            "request_latency",
            _mean_seconds(data.get("request_latency")),
            "AIPerf's request latency runs from sending; schedlab's E2E from arrival (credit issued)",
        ),
    ]
    return run


# -- the per-request records ----------------------------------------------------------------
def sniff_records(lines: Any) -> str | None:
    """None when ``lines`` (parsed JSON lines) are AIPerf per-request records."""
    if not isinstance(lines, list) or not lines:
        return "no JSON lines"
    first = lines[0]
    if not isinstance(first, dict) or not isinstance(first.get("metadata"), dict) or "metrics" not in first:
        return "the first line is not an AIPerf record (an object with metadata and metrics)"
    if "request_start_ns" not in first["metadata"]:
        return "the first record has no metadata.request_start_ns"
    return None


def parse_records(path: Path, lines: list[Any], tool_version: str | None = None) -> list[ImportedRun]:
    """The run of a ``profile_export.jsonl``; the AIPerf version and rate come from the
    ``profile_export_aiperf.json`` beside it when there is one (it is only read)."""
    aggregate = aggregate_beside(path)
    records = []
    for index, line in enumerate(lines, start=1):
        if not isinstance(line, dict) or not isinstance(line.get("metadata"), dict):
            raise ImportFormatError(
                f"{path}: line {index} is not an AIPerf record (an object with metadata and metrics)"
            )
        phase = line["metadata"].get("benchmark_phase")
        if phase not in (None, "profiling"):
            continue
        records.append((index, line))
    if not records:
        raise ImportFormatError(f"{path}: AIPerf records, but none of the profiling phase")
    return records_run(aggregate, tool_version, [read_record(path, index, line) for index, line in records])


def aggregate_beside(path: Path) -> dict[str, Any]:
    """The ``profile_export_aiperf.json`` beside ``path`` (empty when there is none or it is unreadable)."""
    beside = path.with_name(AGGREGATE_FILE)
    if beside.is_file() and beside != path:
        try:
            loaded = json.loads(beside.read_text(encoding="utf-8"))
            return loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            return {}
    return {}


def records_run(aggregate: dict[str, Any], tool_version: str | None, raw: list[dict[str, Any]]) -> list[ImportedRun]:
    """The run of the profiling records ``raw`` (:func:`record_item`'s, in file order)."""
    origin = min(item["arrival"] for item in raw)
    requests = [
        RequestTimes(
            request_id=item["id"],
            arrival_s=(item["arrival"] - origin) / 1e9,
            sent_s=(item["sent"] - origin) / 1e9,
            first_token_s=None if item["first"] is None else (item["first"] - origin) / 1e9,
            finish_s=None if item["finish"] is None else (item["finish"] - origin) / 1e9,
            input_tokens=item["input"],
            output_tokens=item["output"],
            itl_s=item["gaps"],
            error=item["error"],
        )
        for item in raw
    ]
    run = _aggregate_run(aggregate, tool_version, requests)
    if run.started_at_unix_s is None:
        run.started_at_unix_s = origin / 1e9
    if not aggregate:
        run.notes.append(f"no {AGGREGATE_FILE} beside the file: AIPerf version and rate unknown")
    if any(item["client_count"] for item in raw):
        run.notes.append(
            f"{sum(item['client_count'] for item in raw)} record(s) without the server's "
            "usage_completion_tokens: their output tokens are AIPerf's client-side count"
        )
    return [run]


def read_record(path: Path, index: int, line: dict[str, Any]) -> dict[str, Any]:
    metadata, metrics = line["metadata"], line.get("metrics") or {}
    where = f"{path}: line {index}"
    sent = metadata.get("request_start_ns")
    arrival = metadata.get("credit_issued_ns", sent)
    if not isinstance(sent, int) or not isinstance(arrival, int):
        raise ImportFormatError(
            f"{where}: metadata.request_start_ns / credit_issued_ns are not integers "
            "(nanoseconds); expected AIPerf's record timestamps"
        )
    error = line.get("error")
    message = None
    if error:
        message = str(error.get("message") or error.get("type") or "error") if isinstance(error, dict) else str(error)
    ttft = _metric_seconds(where, metrics, "time_to_first_token")
    latency = _metric_seconds(where, metrics, "request_latency")
    if message is None and (ttft is None or latency is None):
        raise ImportFormatError(
            f"{where}: a successful record without time_to_first_token and request_latency; "
            "expected a streamed request's metrics"
        )
    usage = _metric_value(metrics, "usage_completion_tokens")
    output = usage if usage is not None else _metric_value(metrics, "output_sequence_length")
    gaps_entry = metrics.get("inter_chunk_latency")
    gaps = None
    if isinstance(gaps_entry, dict) and isinstance(gaps_entry.get("value"), list):
        scale = UNITS_TO_SECONDS.get(gaps_entry.get("unit"), None)
        if scale is None or not all(number(gap) is not None for gap in gaps_entry["value"]):
            raise ImportFormatError(f"{where}: inter_chunk_latency is not a list of numbers in ms")
        gaps = [float(gap) * scale for gap in gaps_entry["value"]]
    return record_item(
        metadata.get("x_request_id"),
        index,
        arrival,
        sent,
        ttft,
        latency,
        metadata.get("request_end_ns"),
        _metric_value(metrics, "input_sequence_length"),
        output,
        gaps,
        message,
        usage is None,
    )


def record_item(
    request_id: Any,
    index: int,
    arrival: int,
    sent: int,
    ttft: float | None,
    latency: float | None,
    end: Any,
    input_tokens: float | None,
    output: float | None,
    gaps: Any,
    message: str | None,
    no_usage: bool,
) -> dict[str, Any]:
    """One profiling record's times (Unix nanoseconds; ``ttft``, ``latency`` in seconds from
    sending), token counts and chunk gaps (seconds), from :func:`read_record` or the columnar reader."""
    return {
        "id": str(request_id or index),
        "arrival": arrival,
        "sent": sent,
        "first": None if message or ttft is None else sent + round(ttft * 1e9),
        "finish": (sent + round(latency * 1e9)) if latency is not None else (end if isinstance(end, int) else None),
        "input": int(input_tokens or 0),
        "output": int(output or 0),
        "gaps": gaps,
        "error": message,
        "client_count": no_usage and not message,
    }


def _metric_value(metrics: dict[str, Any], name: str) -> float | None:
    entry = metrics.get(name)
    return number(entry.get("value")) if isinstance(entry, dict) else None


def _metric_seconds(where: str, metrics: dict[str, Any], name: str) -> float | None:
    entry = metrics.get(name)
    if entry is None:
        return None
    value = number(entry.get("value")) if isinstance(entry, dict) else None
    scale = UNITS_TO_SECONDS.get(entry.get("unit")) if isinstance(entry, dict) else None
    if value is None or scale is None:
        raise ImportFormatError(
            f'{where}: metrics.{name} is {json.dumps(entry)[:60]}; expected {{"value": <number>, "unit": "ms"}}'
        )
    return value * scale


def _scale(path: Path, name: str, entry: Any) -> float | None:
    if entry is None:
        return None
    if not isinstance(entry, dict) or entry.get("unit") not in UNITS_TO_SECONDS:
        raise ImportFormatError(
            f"{path}: {name} is {json.dumps(entry)[:60]}; expected an object with a time unit (ms) and avg/p50/p90/p99"
        )
    return UNITS_TO_SECONDS[entry["unit"]]


def _mean_seconds(entry: Any) -> float | None:
    if not isinstance(entry, dict) or entry.get("unit") not in UNITS_TO_SECONDS:
        return None
    value = number(entry.get("avg"))
    return None if value is None else value * UNITS_TO_SECONDS[entry["unit"]]


def _workload(config: dict[str, Any]) -> str:
    from runners.json_values import as_dict, as_list

    datasets = as_list(config.get("datasets"))
    prompts = as_dict(as_dict(datasets[0]).get("prompts")) if datasets else {}
    isl, osl = number(as_dict(prompts.get("isl")).get("mean")), number(as_dict(prompts.get("osl")).get("mean"))
    return "AIPerf profile" + (f": prompts {isl:g} / replies {osl:g} tokens" if isl and osl else "")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _iso(value: Any) -> float | None:
    """An ISO time without zone (AIPerf writes local time) as Unix seconds; None otherwise."""
    if not isinstance(value, str):
        return None
    try:
        return time.mktime(time.strptime(value.split(".")[0], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
