"""Importing the peer tools' result files (issue 12 section 3) and exporting runs as vLLM bench
serve JSON, with the files the real tools wrote (tests/data/peer_results/, commands in its
README): numbers checked against the files' own per-request values and figures, wrong-tool,
truncated and empty files refused with the file named and nothing written, the export's key set
against a real vLLM file, the round trip, the CLI and the Results page."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runners.errors import ConfigError, SchedlabError
from runners.imports import IMPORTERS, import_bytes, import_file, parse_file
from runners.imports.export_vllm_bench import export_run, vllm_bench_json
from runners.store.result_store import list_runs, load_run

DATA = Path(__file__).resolve().parents[1] / "data" / "peer_results"
VLLM = DATA / "vllm-bench-serve.json"
GUIDELLM = DATA / "guidellm-benchmarks.json"
AIPERF_RECORDS = DATA / "profile_export.jsonl"
AIPERF_AGGREGATE = DATA / "profile_export_aiperf.json"
SCHEDLAB_RUN = DATA / "schedlab-fcfs-openai-tiny"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- vLLM bench serve ---------------------------------------------------------------------------
def test_vllm_file_is_recomputed_from_its_per_request_lists(tmp_path):
    raw = json.loads(VLLM.read_text())
    before = sha(VLLM)
    [folder] = import_file(VLLM, tmp_path, name="v", tool_version="0.32.0")
    run = load_run(tmp_path, "v")
    rows = run.requests.sort_values("arrival_s").reset_index(drop=True)
    # the file's own lists against its own figures: what we read is what vLLM summarised
    assert abs(np.mean(raw["ttfts"]) - raw["mean_ttft_ms"] / 1000) < 1e-9
    assert len(rows) == raw["num_prompts"] == 50 and run.summary.completed == raw["completed"] == 50
    assert run.summary.failed == 0 and int(rows["output_tokens"].sum()) == raw["total_output_tokens"] == 2400
    assert int(rows["input_tokens"].sum()) == raw["total_input_tokens"] == 4810
    # ours from arrival = vLLM's from sending + the client queue, request by request (start order = arrival order here)
    order = np.argsort(np.asarray(raw["start_times"]) - np.asarray(raw["queue_times"]), kind="stable")
    expected_ttft = (np.asarray(raw["ttfts"]) + np.asarray(raw["queue_times"]))[order]
    assert np.allclose(rows["ttft_s"], expected_ttft, rtol=0, atol=1e-9)
    assert abs(run.summary.ttft_s.mean - np.mean(expected_ttft)) < 1e-9
    # TPOT and ITL have vLLM's definitions: the file's own means, to 1e-9 s
    assert abs(run.summary.tpot_s.mean - raw["mean_tpot_ms"] / 1000) < 1e-9
    assert abs(run.summary.itl_s.mean - raw["mean_itl_ms"] / 1000) < 1e-9
    assert abs(run.summary.tpot_s.median - raw["median_tpot_ms"] / 1000) < 1e-9
    imported = run.summary.imported
    assert imported["label"] == "imported from vLLM bench serve 0.32.0" == run.config["label"]
    assert imported["metrics"]["ttft_s"] == "recomputed" and imported["metrics"]["slo_attainment"] == "not measured"
    assert run.summary.slo_attainment is None and run.summary.G is None
    # the source is copied unchanged and left unchanged
    assert sha(folder / imported["source_file"]) == sha(VLLM) == before
    listed = {record.run_id: record for record in list_runs(tmp_path)}
    assert listed["v"].status == "done" and listed["v"].imported["tool"] == "vllm-bench"


def test_vllm_file_without_version_says_so():
    [run] = parse_file(VLLM)
    assert run.label == "imported from vLLM bench serve (version unknown)"
    assert "the file records no vLLM version" in run.notes


# -- GuideLLM ---------------------------------------------------------------------------------------
def test_guidellm_file_gives_one_run_per_benchmark(tmp_path):
    raw = json.loads(GUIDELLM.read_text())
    folders = import_file(GUIDELLM, tmp_path, name="g")
    assert [folder.name for folder in folders] == ["g-b0", "g-b1"]
    for index, benchmark in enumerate(raw["benchmarks"]):
        run = load_run(tmp_path, f"g-b{index}")
        stats = benchmark["requests"]["successful"]
        metrics = benchmark["metrics"]
        assert len(run.requests) == len(stats) == 40 and run.summary.completed == 40
        assert run.summary.arrival_rate_rps == benchmark["config"]["strategy"]["rate"] == [2.0, 4.0][index]
        assert run.summary.imported["label"] == "imported from GuideLLM 0.8.1"
        # GuideLLM's inter-token latency is our TPOT; every reply has 48 tokens, so its token weighting is even
        assert {int(n) for n in run.requests["output_tokens"]} == {48}
        assert abs(run.summary.tpot_s.mean - metrics["inter_token_latency_ms"]["successful"]["mean"] / 1000) < 1e-9
        # its TTFT starts at sending: ours = theirs + (request_start - targeted_start), request by request
        by_id = run.requests.set_index("request_id")
        for stat in stats:
            timings = stat["info"]["timings"]
            ours = by_id.loc[stat["request_id"], "ttft_s"]
            theirs = stat["time_to_first_token_ms"] / 1000 + timings["request_start"] - timings["targeted_start"]
            assert abs(ours - theirs) < 1e-6
        # GuideLLM's TPOT includes the first token: kept beside ours, never as ours
        definitions = {d["tool_metric"]: d for d in run.summary.imported["definitions"]}
        tpot = definitions["time_per_output_token_ms"]
        assert tpot["metric"] == "tpot_s" and "includes the first token" in tpot["note"]
        assert abs(tpot["tool_value"] - metrics["time_per_output_token_ms"]["successful"]["mean"] / 1000) < 1e-12
        assert run.summary.tpot_s.mean < tpot["tool_value"]


# -- AIPerf -----------------------------------------------------------------------------------------
def test_aiperf_records_recomputed_with_the_servers_token_count(tmp_path):
    records = [json.loads(line) for line in AIPERF_RECORDS.read_text().splitlines()]
    import_file(AIPERF_RECORDS, tmp_path, name="a")
    run = load_run(tmp_path, "a")
    assert run.summary.imported["label"] == "imported from AIPerf 0.13.0"  # from the aggregate file beside it
    assert len(run.requests) == len(records) == 50 and run.summary.completed == 50
    by_id = run.requests.set_index("request_id")
    for record in records:
        metadata, metrics = record["metadata"], record["metrics"]
        row = by_id.loc[metadata["x_request_id"]]
        ttft, latency = metrics["time_to_first_token"]["value"] / 1000, metrics["request_latency"]["value"] / 1000
        wait = (metadata["request_start_ns"] - metadata["credit_issued_ns"]) / 1e9
        assert abs(row["ttft_s"] - (ttft + wait)) < 1e-9 and abs(row["e2e_s"] - (latency + wait)) < 1e-9
        assert row["output_tokens"] == metrics["usage_completion_tokens"]["value"] == 48
        # AIPerf's "inter token latency" is our TPOT with its own (client-side) token count
        osl = metrics["output_sequence_length"]["value"]
        assert abs(row["tpot_s"] * 47 - metrics["inter_token_latency"]["value"] / 1000 * (osl - 1)) < 1e-9
        assert abs(sum(metrics["inter_chunk_latency"]["value"]) / 1000 - (latency - ttft)) < 1e-9
    gaps = np.concatenate([np.asarray(r["metrics"]["inter_chunk_latency"]["value"]) / 1000 for r in records])
    assert abs(run.summary.itl_s.mean - gaps.mean()) < 1e-12


def test_aiperf_aggregate_maps_run_level_figures(tmp_path):
    raw = json.loads(AIPERF_AGGREGATE.read_text())
    import_file(AIPERF_AGGREGATE, tmp_path, name="agg")
    run = load_run(tmp_path, "agg")
    assert len(run.requests) == 0 and run.summary.requests == 50 and run.summary.completed == 50
    assert abs(run.summary.ttft_s.mean - raw["time_to_first_token"]["avg"] / 1000) < 1e-12
    assert abs(run.summary.tpot_s.p90 - raw["inter_token_latency"]["p90"] / 1000) < 1e-12
    provenance = run.summary.imported["metrics"]
    assert provenance["ttft_s.mean"] == "mapped" and provenance["G"] == "not measured"
    assert run.summary.request_throughput_rps is None  # AIPerf's throughput is not defined as ours
    assert any(
        d["tool_metric"] == "inter_token_latency" and d["metric"] == "tpot_s"
        for d in run.summary.imported["definitions"]
    )


# -- bad input ----------------------------------------------------------------------------------------
def test_wrong_tool_file_is_refused_naming_the_file_and_what_was_tried(tmp_path):
    results = tmp_path / "res"
    with pytest.raises(SchedlabError) as info:
        import_file(VLLM, results, tool="guidellm")
    text = str(info.value)
    assert str(VLLM) in text and "GuideLLM benchmarks.json" in text and "guidellm: no 'benchmarks' list" in text
    with pytest.raises(SchedlabError) as info:
        import_file(SCHEDLAB_RUN / "summary.json", results)  # a schedlab file: no importer reads it
    text = str(info.value)
    assert "summary.json" in text and all(f"{name}:" in text for name in IMPORTERS)
    assert not results.exists()


def test_truncated_files_are_refused_and_nothing_is_written(tmp_path):
    results = tmp_path / "res"
    for source in (VLLM, GUIDELLM, AIPERF_AGGREGATE, AIPERF_RECORDS):
        cut = tmp_path / source.name
        data = source.read_bytes()
        cut.write_bytes(data[: len(data) // 2])
        with pytest.raises(SchedlabError) as info:
            import_file(cut, results)
        assert str(cut) in str(info.value) and "cut short" in str(info.value), str(info.value)
    assert not results.exists()


def test_empty_file_and_missing_file(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(SchedlabError, match=r"empty\.json: the file is empty; expected a result file"):
        import_file(empty, tmp_path / "res")
    with pytest.raises(SchedlabError, match="no such file"):
        import_file(tmp_path / "absent.json", tmp_path / "res")


def test_a_taken_name_is_refused_before_anything_is_written(tmp_path):
    import_file(VLLM, tmp_path, name="g-b1")
    with pytest.raises(ConfigError, match="'g-b1' already exists"):
        import_file(GUIDELLM, tmp_path, name="g")
    assert not (tmp_path / "g-b0").exists()  # the first benchmark was not written either
    assert load_run(tmp_path, "g-b1").summary.imported["tool"] == "vllm-bench"


def test_upload_errors_name_the_uploaded_file(tmp_path):
    with pytest.raises(SchedlabError) as info:
        import_bytes("bench.json", VLLM.read_bytes()[:1000], tmp_path)
    assert "uploaded file 'bench.json'" in str(info.value) and "schedlab-import-" not in str(info.value)
    [folder] = import_bytes("my run.json", VLLM.read_bytes(), tmp_path)
    assert (folder / "source-my_run.json").read_bytes() == VLLM.read_bytes()


# -- export -------------------------------------------------------------------------------------------
def test_export_has_the_real_vllm_key_set_and_round_trips(tmp_path):
    import_file(VLLM, tmp_path, name="v", tool_version="0.32.0")
    path = export_run("v", tmp_path, tmp_path / "v.json")
    exported, real = json.loads(path.read_text()), json.loads(VLLM.read_text())
    extra = set(exported) - set(real)
    assert set(real) <= set(exported)
    assert extra <= {"schedlab_export"} | {
        f"{s}_{m}_ms"
        for s in ("mean", "median", "std", "p99")
        for m in ("client_queue_time", "e2el_including_client_queue")
    }
    for key in ("completed", "total_input_tokens", "total_output_tokens", "input_lens", "output_lens"):
        assert exported[key] == real[key], key
    assert abs(exported["mean_tpot_ms"] - real["mean_tpot_ms"]) < 1e-6
    import_file(path, tmp_path, name="v2")
    first, second = load_run(tmp_path, "v").requests, load_run(tmp_path, "v2").requests
    for column in ("ttft_s", "tpot_s", "e2e_s", "queue_s", "input_tokens", "output_tokens"):
        assert np.allclose(first[column], second[column], rtol=0, atol=1e-12), column


def test_export_of_a_schedlab_run_uses_vllms_definitions(tmp_path):
    shutil.copytree(SCHEDLAB_RUN, tmp_path / "s")
    run = load_run(tmp_path, "s")
    data = vllm_bench_json(run)
    rows = run.requests
    from_send = (rows["first_token_s"] - rows["dispatch_s"]).to_numpy()
    assert abs(data["mean_ttft_ms"] - from_send.mean() * 1000) < 1e-9
    queue = (rows["dispatch_s"] - rows["arrival_s"]).to_numpy()
    assert abs(data["mean_client_queue_time_ms"] - queue.mean() * 1000) < 1e-9  # held time is reported, not hidden
    assert abs(data["mean_tpot_ms"] - run.summary.tpot_s.mean * 1000) < 1e-9
    assert data["completed"] == 50 and data["num_prompts"] == 50 and data["itls"] == [[]] * 50


# -- CLI ------------------------------------------------------------------------------------------------
def test_cli_import_and_export_through_the_command_line_parser(tmp_path, capsys):
    from runners.app.cli import make_parser

    parser = make_parser()  # every command with its arguments (runners.imports.cli's build_import, build_export)
    args = parser.parse_args(["import", str(GUIDELLM), "--results", str(tmp_path), "--name", "g"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "g-b0: imported from GuideLLM 0.8.1 (40 requests recomputed)" in out and "includes the first token" in out
    args = parser.parse_args(
        ["export", "g-b1", "--format", "vllm-bench", "-o", str(tmp_path / "g.json"), "--results", str(tmp_path)]
    )
    assert args.handler(args) == 0
    assert json.loads((tmp_path / "g.json").read_text())["completed"] == 40
    with pytest.raises(SystemExit):
        parser.parse_args(["import", str(VLLM), "--tool", "nope"])


# -- the Results page ---------------------------------------------------------------------------------
@pytest.fixture
def page_results(monkeypatch, tmp_path) -> Path:
    folder = tmp_path / "res"
    folder.mkdir()
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", folder)
    shutil.copytree(SCHEDLAB_RUN, folder / "schedlab")
    import_file(VLLM, folder, name="vllm", tool_version="0.32.0")
    import_file(GUIDELLM, folder, name="guidellm")
    import_file(AIPERF_RECORDS, folder, name="aiperf")
    return folder


def test_results_page_compares_imported_runs_with_a_schedlab_run(page_results):
    from tests.integration.test_app import open_page

    app = open_page("pages/2_Results.py")
    listing = app.dataframe[0].value
    sources = dict(zip(listing["run"], listing["source"]))
    assert sources["vllm"] == "imported from vLLM bench serve 0.32.0"
    assert sources["guidellm-b0"] == sources["guidellm-b1"] == "imported from GuideLLM 0.8.1"
    assert sources["aiperf"] == "imported from AIPerf 0.13.0" and pd.isna(sources["schedlab"])
    app.multiselect(key="compare_runs").set_value(["schedlab", "vllm", "guidellm-b0", "aiperf"]).run()
    assert not app.exception, app.exception
    from tests.integration.test_results_page_app import comparison

    table, _, titles = comparison(app)  # headers are display names; each one's tooltip holds its run id
    table = table.set_index(table.columns[0])
    named = {title.removeprefix("run "): name for name, title in titles.items() if title.startswith("run ")}
    assert set(named) == {"schedlab", "vllm", "guidellm-b0", "aiperf"}, titles
    assert named["aiperf"].startswith("aiperf") and named["schedlab"].startswith("fcfs")
    assert "definition" in table.columns
    tpot = table.loc["TPOT mean (ms)", "definition"]
    assert "guidellm-b0: definition differs (time_per_output_token_ms" in tpot
    assert "aiperf: definition differs (inter_token_latency" in tpot
    assert "not measured by GuideLLM" in table.loc["SLO attainment (%)", "definition"]
    notes = " ".join(block.value for block in app.markdown)
    assert "includes the first token" in notes and "AIPerf counts n by re-tokenizing" in notes


def test_results_page_upload_imports_and_refuses_a_bad_file(page_results):
    from tests.integration.test_app import open_page

    app = open_page("pages/2_Results.py")
    app.get("file_uploader")[0].upload("profile_export_aiperf.json", AIPERF_AGGREGATE.read_bytes()).run()
    app.text_input(key="import_name").input("agg").run()
    app.button(key="import_button").click().run()
    assert not app.exception, app.exception
    assert any("Imported 1 run(s): agg" in block.value for block in app.success)
    assert load_run(page_results, "agg").summary.imported["tool"] == "aiperf"
    app.get("file_uploader")[0].upload("cut.json", GUIDELLM.read_bytes()[:5000]).run()
    app.text_input(key="import_name").input("cut").run()
    app.button(key="import_button").click().run()
    errors = " ".join(block.value for block in app.error)
    assert "Nothing imported" in errors and "uploaded file 'cut.json'" in errors and "cut short" in errors
    assert not (page_results / "cut").exists()


def test_results_page_labels_approximate_token_counts(page_results):
    from tests.integration.test_app import open_page

    config_path = page_results / "schedlab" / "config.json"
    config = json.loads(config_path.read_text())
    config["resolved"]["tokenization"].update(approximate=True, source="approximate: no tokenizer answered")
    config_path.write_text(json.dumps(config))
    app = open_page("pages/2_Results.py")
    app.multiselect(key="compare_runs").set_value(["schedlab", "vllm"]).run()
    warnings = [block.value for block in app.warning]
    assert any(
        "schedlab: token counts approximate (4 characters per token); source: approximate: no tokenizer "
        "answered" in text
        for text in warnings
    ), warnings
    assert not any(text.startswith("vllm: token counts approximate") for text in warnings)


def test_guidellms_incomplete_requests_import_as_cancelled_not_failed(tmp_path):
    raw = json.loads(GUIDELLM.read_text())
    benchmark = raw["benchmarks"][0]
    moved = benchmark["requests"]["successful"][:3]  # pretend the benchmark ended with 3 in flight
    benchmark["requests"]["successful"] = benchmark["requests"]["successful"][3:]
    benchmark["requests"]["incomplete"] = moved
    raw["benchmarks"] = [benchmark]
    source = tmp_path / "benchmarks.json"
    source.write_text(json.dumps(raw))
    [folder] = import_file(source, tmp_path / "results", name="g")
    run = load_run(tmp_path / "results", folder.name)
    assert (run.summary.completed, run.summary.cancelled, run.summary.failed) == (37, 3, 0)
    assert run.summary.requests == 40 and run.summary.not_run == 0


def test_a_timestamp_no_date_holds_is_refused_and_nothing_is_written(tmp_path):
    """AIPerf records whose nanosecond stamps are 1e30 (3e13 years) were a traceback from the
    date formatting, after the run folder was made; now one line, before anything is written."""
    records = [json.loads(line) for line in AIPERF_RECORDS.read_text().splitlines()]
    for record in records:
        metadata = record["metadata"]
        shift = 10**30 - metadata["credit_issued_ns"]
        for key in ("credit_issued_ns", "request_start_ns", "request_ack_ns", "request_end_ns"):
            if isinstance(metadata.get(key), int):
                metadata[key] += shift
    source = tmp_path / "far" / "profile_export.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps(record) + "\n" for record in records))
    results = tmp_path / "res"
    with pytest.raises(SchedlabError, match="which no date holds; expected timestamps in the tool's own unit"):
        import_file(source, results)
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.parametrize(
    ("burstiness", "expected"), [("Infinity", "constant"), ("1.0", "poisson"), ("0.5", "gamma"), ("null", "poisson")]
)
def test_vllm_burstiness_infinity_imports_as_constant_arrivals(tmp_path, burstiness, expected):
    """vLLM writes ``"burstiness": Infinity`` for ``--burstiness inf`` (every gap exactly 1 /
    rate); the importer's finite-number reader made it None, so the run read as Poisson."""
    text = VLLM.read_text()
    raw = json.loads(text)
    raw["burstiness"] = 0.0  # a marker replaced by the literal the file would hold
    source = tmp_path / "vllm-bench.json"
    source.write_text(json.dumps(raw).replace('"burstiness": 0.0', f'"burstiness": {burstiness}'))
    import_file(source, tmp_path / "res", name="b")
    assert load_run(tmp_path / "res", "b").summary.arrival_process == expected


@pytest.mark.parametrize(
    ("arrival", "rate", "burstiness"),
    [({"process": "all-at-once"}, "inf", 1.0), ({"process": "constant", "rate": 4}, 4.0, float("inf"))],
)
def test_export_writes_vllms_rate_burstiness_ids_and_save_date(tmp_path, arrival, rate, burstiness):
    """All at once, vLLM writes ``"request_rate": "inf"`` (not the config's unused 4.0) and its
    default burstiness 1.0; constant gaps are ``burstiness: Infinity``; ``tokenizer_id`` is the
    model's when no tokenizer was given; ``date`` is when the result was saved (the run's end)."""
    import calendar
    import time

    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    config = parse_config({"engine": {"kind": "sim"}, "workload": {"requests": 20, "arrival": arrival}, "run_id": "x"})
    outcome = execute_run(config, tmp_path)
    data = json.loads(export_run("x", tmp_path, tmp_path / "x.json").read_text())
    assert data["request_rate"] == rate and data["burstiness"] == burstiness
    assert data["tokenizer_id"] == data["model_id"]
    ended = calendar.timegm(time.strptime(outcome.summary.finished_at, "%Y-%m-%dT%H:%M:%SZ"))
    assert data["date"] == time.strftime("%Y%m%d-%H%M%S", time.localtime(ended))


def test_cli_compare_of_imported_runs_says_where_they_came_from_and_how_definitions_differ(tmp_path, capsys):
    """GuideLLM's TTFT is timed from sending, schedlab's from arrival: the command-line compare
    marks every row whose imported figure is not schedlab's own, and lists each imported run's
    label and definitions under the table (it printed the numbers alone)."""
    from runners.app.cli import main

    import_file(GUIDELLM, tmp_path, name="g")
    import_file(VLLM, tmp_path, name="v", tool_version="0.32.0")
    capsys.readouterr()
    assert main(["compare", "v", "g-b0", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines()}
    assert "TTFT mean (s) *" in rows and "E2E mean (s) *" in rows and "completed requests" in rows
    assert "  g-b0: imported from GuideLLM 0.8.1" in out and "  v: imported from vLLM bench serve 0.32.0" in out
    assert "g-b0: ttft_s vs the tool's time_to_first_token_ms: GuideLLM measures TTFT from sending" in out
    assert "v: e2e_s vs the tool's e2el: vLLM measures E2EL from sending; schedlab from the scheduled arrival" in out


def test_vllm_imports_say_its_send_lag_is_in_ttft_and_e2e():
    """vLLM's own per-request send lag (queue_times) is in schedlab's TTFT and E2E, timed from the
    scheduled arrival: the definitions say so, with this file's mean lag."""
    raw = json.loads(VLLM.read_text())
    [run] = parse_file(VLLM)
    lag = 1000 * sum(raw["queue_times"]) / len(raw["queue_times"])
    notes = {definition.metric: definition for definition in run.definitions}
    assert notes["ttft_s"].tool_value == pytest.approx(raw["mean_ttft_ms"] / 1000)
    assert "mean_e2el_ms" not in raw and notes["e2e_s"].tool_value is None  # vLLM reports e2el only when asked
    assert f"its own send lag, queue_times, is in ours: {lag:.2f} ms on average in this file" in notes["ttft_s"].note
