"""Export any saved run as a vLLM ``bench serve``-compatible result JSON, so scripts that read
those keep working.

The keys are those vLLM's ``vllm/benchmarks/serve.py`` (0.32.0: ``main``'s ``result_json``)
writes with ``--save-result --save-detailed`` (``date`` ... ``max_concurrency``, ``duration``, counts, throughputs, the
per-request lists, ``mean_/median_/std_/p99_`` of ``ttft``, ``tpot``, ``itl`` in ms), with vLLM's
definitions: a request's ``start_times`` entry is when it was sent (our dispatch, seconds since
the run's start), ``ttfts`` and ``latencies`` are measured from sending, and ``queue_times``
holds the time before sending (a scheduler's hold, our queue time). When some request waited,
the ``*_client_queue_time_ms`` and ``*_e2el_including_client_queue_ms`` figures vLLM writes for
a client-side queue are written too, so held time is never hidden.

What schedlab does not keep is said in ``schedlab_export`` (the one key vLLM does not write):
the per-request ``itls`` lists are empty (schedlab keeps each request's largest gap, not every
gap), so the ``*_itl_ms`` figures come from the run's ITL summary, without ``std``;
``generated_texts`` are empty; ``max_output_tokens_per_s`` is null.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from runners.json_values import as_dict
from runners.metrics.run_metrics import distribution
from runners.store.models import RunSummary
from runners.store.output_paths import STDOUT, checked_output_file
from runners.store.result_store import DEFAULT_RESULTS_DIR, RunData, load_run, write_json_atomic

FORMATS = ("vllm-bench",)


def _ms_figures(name: str, values: Any, out: dict[str, Any]) -> None:
    """vLLM's ``mean_/median_/std_/p99_<name>_ms`` of ``values`` (seconds); vLLM's rule: 0 when
    there are none."""
    array = np.asarray(values, dtype=float)
    array = array[np.isfinite(array)]
    shown = distribution(array)  # None each when there are none
    out[f"mean_{name}_ms"] = _ms(shown["mean"])
    out[f"median_{name}_ms"] = _ms(shown["median"])
    out[f"std_{name}_ms"] = float(np.std(array)) * 1000.0 if array.size else 0.0
    out[f"p99_{name}_ms"] = _ms(shown["p99"])


def _ms(seconds: float | None) -> float:
    """``seconds`` in milliseconds; 0 for None (vLLM's figure when there are no values)."""
    return 0.0 if seconds is None else seconds * 1000.0


def _max_concurrency(starts: list[float], latencies: list[float], ok: list[bool]) -> int:
    """vLLM's ``max_concurrent_requests``: the most successful requests active in one whole
    second bucket since the first start."""
    pairs = [(s, s + lat) for s, lat, good in zip(starts, latencies, ok) if good]
    if not pairs:
        return 0
    first = min(s for s, _ in pairs)
    buckets = np.zeros(int(math.ceil(max(e for _, e in pairs) - first)) + 1)
    for start, end in pairs:
        buckets[int(start - first) : int(end - first) + 1] += 1
    return int(buckets.max())


@dataclass
class _Requests:
    """A run's requests as vLLM bench serve lists them: in arrival order, times from when each
    was sent (seconds), failed requests as zeros."""

    rows: pd.DataFrame
    done: pd.Series
    starts: list[float]
    queue: list[float]
    ttfts: list[float]
    latencies: list[float]
    output_lens: list[int]
    input_lens: list[int]


def _requests(run: RunData) -> _Requests:
    rows = run.requests.sort_values(["arrival_s", "request_id"], kind="stable")
    done = rows["error"].isna() & rows["finish_s"].notna() & rows["first_token_s"].notna()
    sent = rows["dispatch_s"].fillna(rows["arrival_s"])
    return _Requests(
        rows,
        done,
        [float(x) for x in sent],
        [float(x) for x in (sent - rows["arrival_s"])],
        [float(f - s) if ok else 0.0 for f, s, ok in zip(rows["first_token_s"], sent, done)],
        [float(f - s) if ok else 0.0 for f, s, ok in zip(rows["finish_s"], sent, done)],
        [int(n) if ok else 0 for n, ok in zip(rows["output_tokens"], done)],
        [int(n) for n in rows["input_tokens"]],
    )


def _model_id(run: RunData, imported: dict[str, Any]) -> Any:
    """The served model's name: the launch config's, else an imported run's."""
    engine = as_dict(as_dict(run.config.get("config")).get("engine"))
    return (
        engine.get("served_model_name")
        or engine.get("model")
        or (as_dict(run.config.get("imported")).get("model") if imported else None)
    )


def _date(summary: RunSummary) -> str | None:
    """vLLM's result ``date``: the local time it saved the result, i.e. when the run ended
    (``finished_at``; else start + duration; None when neither is known)."""
    import calendar

    ended: float | None = None
    if isinstance(summary.finished_at, str):
        try:
            ended = calendar.timegm(time.strptime(summary.finished_at, "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            ended = None
    if ended is None and isinstance(summary.started_at_unix_s, (int, float)):
        ended = summary.started_at_unix_s + (summary.duration_s or 0.0)
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(ended)) if ended is not None else None


def _burstiness(run: RunData, process: str | None) -> float | None:
    """vLLM's ``burstiness`` for the run's arrivals: 1.0 for Poisson (and for all at once, vLLM's
    default beside an infinite rate), infinity for constant gaps (vLLM writes ``Infinity``), the
    config's value for gamma; None when unknown."""
    if process in ("poisson", "all-at-once"):
        return 1.0
    if process == "constant":
        return float("inf")
    if process == "gamma":
        arrival = as_dict(as_dict(as_dict(run.config.get("config")).get("workload")).get("arrival"))
        value = arrival.get("burstiness")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return None


def _add_latency_statistics(result: dict[str, Any], requests: _Requests, summary: RunSummary) -> None:
    """TTFT, TPOT and ITL figures (ms), and the client-queue ones when a scheduler held requests."""
    done = requests.done
    _ms_figures("ttft", [t for t, ok in zip(requests.ttfts, done) if ok], result)
    _ms_figures("tpot", requests.rows.loc[done, "tpot_s"].dropna(), result)
    itl = summary.itl_s
    for statistic in ("mean", "median", "p99"):
        value = getattr(itl, statistic) if itl is not None else None
        result[f"{statistic}_itl_ms"] = value * 1000.0 if isinstance(value, (int, float)) else 0.0
    result["std_itl_ms"] = None
    queue = requests.queue
    if any(wait > 0 for wait in queue):
        _ms_figures("client_queue_time", [w for w, ok in zip(queue, done) if ok], result)
        _ms_figures(
            "e2el_including_client_queue",
            [lat + w for lat, w, ok in zip(requests.latencies, queue, done) if ok],
            result,
        )


def vllm_bench_json(run: RunData) -> dict[str, Any]:
    """The vLLM bench serve result of ``run`` (see the module docstring)."""
    summary, requests = run.summary, _requests(run)
    done, starts, latencies = requests.done, requests.starts, requests.latencies
    completed = int(done.sum())
    imported = as_dict(summary.imported)  # {} (falsy) when the run was not imported
    rate = summary.arrival_rate_rps
    process = summary.arrival_process
    model_id = _model_id(run, imported)
    workload = as_dict(as_dict(run.config.get("config")).get("workload"))
    result: dict[str, Any] = {
        "date": _date(summary),
        "endpoint_type": summary.engine,
        "backend": summary.engine,
        "label": imported["label"] if imported else None,
        "model_id": model_id,
        "tokenizer_id": workload.get("tokenizer") or model_id,  # vLLM: --tokenizer, else the model
        "num_prompts": int(summary.requests_total or len(requests.rows)),
        "request_rate": "inf" if process == "all-at-once" or rate is None else rate,
        "burstiness": _burstiness(run, process),
        "max_concurrency": None,
        "duration": summary.duration_s or 0.0,
        "completed": completed,
        "failed": int(len(requests.rows) - completed),
        "total_input_tokens": int(sum(n for n, ok in zip(requests.input_lens, done) if ok)),
        "total_output_tokens": int(sum(requests.output_lens)),
        "request_throughput": summary.request_throughput_rps,
        "request_goodput": None,
        "output_throughput": summary.output_throughput_tps,
        "total_token_throughput": summary.total_throughput_tps,
        "input_lens": requests.input_lens,
        "output_lens": requests.output_lens,
        "ttfts": requests.ttfts,
        "itls": [[] for _ in starts],
        "latencies": latencies,
        "start_times": starts,
        "queue_times": requests.queue,
        "generated_texts": ["" for _ in starts],
        "errors": [str(e) if isinstance(e, str) else "" for e in requests.rows["error"]],
        "max_output_tokens_per_s": None,
        "max_concurrent_requests": _max_concurrency(starts, latencies, list(done)),
        "rtfx": 0.0,
    }
    _add_latency_statistics(result, requests, summary)
    result["schedlab_export"] = {
        "run_id": run.run_id,
        "notes": [
            "start_times: when each request was sent (seconds since the run's start); ttfts and latencies from "
            "then, as vLLM measures; queue_times: the wait before sending (a scheduler's hold)",
            "itls: schedlab keeps no per-request chunk gaps, so the lists are empty; mean/median/p99_itl_ms come "
            "from the run's ITL summary over every gap, std_itl_ms is null",
            "generated_texts are empty and max_output_tokens_per_s is null: schedlab keeps neither",
        ],
    }
    return result


def export_run(
    run_id: str, results: str | Path = DEFAULT_RESULTS_DIR, output: str | Path | None = None, format: str = "vllm-bench"
) -> Path | None:
    """Write run ``run_id`` (an id, unique prefix or folder) as a vLLM bench serve JSON to
    ``output`` (default ``<run_id>.vllm-bench.json`` in the working folder; ``-``: standard
    output); returns the path written (None for standard output). Only a regular file in an
    existing folder outside every run folder is written (:func:`checked_output_file`)."""
    from runners.errors import ConfigError

    if format not in FORMATS:
        raise ConfigError("format", f"unknown export format {format!r}; expected one of: {', '.join(FORMATS)}")
    run = load_run(results, run_id, allow_path=True)
    if output is not None and os.fspath(output) == STDOUT:
        json.dump(vllm_bench_json(run), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return None
    path = checked_output_file(
        output if output is not None else f"{run.run_id}.vllm-bench.json", "-o", results, forbidden=[run.folder]
    )
    write_json_atomic(path, vllm_bench_json(run))
    return path
