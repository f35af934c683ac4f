"""Live view speed (issue 5 target: the live view keeps up with a run finishing 50 requests/s).

Starts a background job exactly as the Launch page does: the simulator paced at real time
(pace 1), 32 instances, 3,000 requests arriving as a Poisson process at 50 req/s. Every
second, as the page's fragment does, it reads the run folder (runners.views.live.read_live), builds
the two live figures and serialises them (what Streamlit sends), and also runs the whole Launch
page under AppTest. It reports:
  - refresh cost: seconds per refresh (read + figures + JSON), and per full page run;
  - lag: run time elapsed minus the newest finish time the view has seen (seconds);
  - the busiest 10 s of finishes the view observed (req/s), to show the run did finish ~50/s.
Writes bench/results/live_view.json and prints it.

Usage: python -m bench.live_view
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS, ROOT

OUT = RESULTS / "live_view.json"


def main() -> None:
    from streamlit.testing.v1 import AppTest

    import runners.store.result_store as store
    from runners.app.jobs import new_job_spec, read_job, start_job
    from runners.run.config import parse_config
    from runners.views.charts import live_instance_series, live_latency_scatter
    from runners.views.live import read_live

    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch)
        store.DEFAULT_RESULTS_DIR = results
        config = parse_config(
            {
                "engine": {"kind": "sim", "instances": 32, "pace": 1.0},
                "workload": {"requests": 3000, "seed": 0, "arrival": {"process": "poisson", "rate": 50.0}},
                "scheduler": {"name": "fcfs"},
            }
        )
        folder = start_job(new_job_spec([config], label="live bench"), results)
        job = read_job(folder)
        assert job is not None
        run_id = job.spec.runs[0].run_id
        assert run_id is not None  # a job's runs are given their ids when it starts
        app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
        app.switch_page("pages/1_Launch.py").run()
        refresh, page_runs, lags, seen = [], [], [], []
        while True:
            tick = time.perf_counter()
            snapshot = read_live(results / run_id)
            if snapshot is not None and snapshot.elapsed_s is not None:
                figures = (live_latency_scatter(snapshot.requests), live_instance_series(snapshot.timeseries))
                payload = sum(len(fig.to_json()) for fig in figures)
                refresh.append(time.perf_counter() - tick)
                if snapshot.status == "running" and snapshot.done:
                    lags.append(snapshot.elapsed_s - float(snapshot.requests["finish_s"].max()))
                seen.append((time.time(), snapshot.done))
                started = time.perf_counter()
                app.run()
                page_runs.append(time.perf_counter() - started)
                assert not app.exception, app.exception
                if snapshot.status != "running":
                    break
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - tick)))
        final = store.load_run(results, run_id).summary
    times = np.array([t for t, _ in seen])
    done = np.array([d for _, d in seen])
    window = [
        (done[j] - done[i]) / (times[j] - times[i])
        for i in range(len(times))
        for j in range(i + 1, len(times))
        if 9.5 <= times[j] - times[i] <= 10.5
    ]
    observed_rate = max(window) if window else None  # the busiest 10 s the view saw
    report: dict[str, Any] = {
        "requests": 3000,
        "arrival_rate_rps": 50.0,
        "instances": 32,
        "run_status": final.status,
        "run_request_throughput_rps": final.request_throughput_rps,
        "refreshes": len(refresh),
        "refresh_s": {
            "median": statistics.median(refresh),
            "p99": float(np.percentile(refresh, 99)),
            "max": max(refresh),
        },
        "page_run_s": {
            "median": statistics.median(page_runs),
            "p99": float(np.percentile(page_runs, 99)),
            "max": max(page_runs),
        },
        "last_payload_bytes": payload,
        "lag_s": {"median": statistics.median(lags), "p99": float(np.percentile(lags, 99)), "max": max(lags)}
        if lags
        else None,
        "observed_peak_10s_finish_rate_rps": observed_rate,
    }
    report["keeps_up"] = bool(
        report["refresh_s"]["max"] < 1.0 and report["page_run_s"]["p99"] < 1.0 and lags and report["lag_s"]["p99"] < 3.0
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
