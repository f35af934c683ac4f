"""Issue 27 defects 5 and 11 (the Launch form's parts): a field of another engine never reaches a
run or blocks one (the simulator's 16 slots sent to vLLM as --max-num-seqs; an attach form that
said "3 field(s) need attention" and showed one), and the form's text: errors named by the field's
label in a plain sentence (not the config path and pydantic's wording), the schedulers an engine
cannot run said once, the two scls Gamma fields told apart, the simulator's preset name in a column
wide enough for it at 1,024 px."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from runners.app.launch_form import (
    build_job,
    default_form_values,
    engine_fields,
    form_message,
    parameter_label,
    unavailable_note,
)

ROOT = Path(__file__).resolve().parents[2]
SIM_ONLY = {
    "engine.preset": "qwen2.5-7b-2xv100-vllm",
    "engine.kv_capacity_tokens": "50000",
    "engine.planning_model": "fitted",
    "engine.planning_error": "0.1",
    "engine.pace": 100.0,
}


def fake_vllm_python(tmp_path: Path) -> str:
    """A 'python' that can import an (empty) vllm package: the launch's check passes."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_fields_of_the_simulator_never_reach_or_block_another_engine(tmp_path):
    values = {**default_form_values(["fcfs"]), **SIM_ONLY, "trials.seeds": ""}
    attach = build_job({**values, "engine.kind": "openai", "engine.urls": "http://gpu-box:8000"}, ["fcfs"])
    assert attach.errors == {} and attach.spec is not None  # they were 'extra inputs not permitted' errors
    assert attach.spec.runs[0].engine.kind == "openai"
    launched = {
        **values,
        "engine.kind": "vllm",
        "engine.model": str(tmp_path),
        "engine.python": fake_vllm_python(tmp_path),
    }
    result = build_job(launched, ["fcfs"], check_workload=False)
    assert result.errors == {} and result.spec is not None
    engine = result.spec.runs[0].engine.model_dump()
    assert "planning_model" not in engine and "kv_capacity_tokens" not in engine and "preset" not in engine
    assert engine_fields("sim") >= set(SIM_ONLY) and not engine_fields("vllm") & set(SIM_ONLY)
    assert "engine.max_model_len" in engine_fields("vllm") and "engine.urls" in engine_fields("openai")


def open_launch(monkeypatch, results_dir):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    app.switch_page("pages/1_Launch.py").run()
    assert not app.exception, app.exception
    return app


def test_switching_to_vllm_writes_its_own_blank_max_num_seqs_and_launches_no_sim_field(
    monkeypatch, results_dir, tmp_path
):
    """The simulator's max_num_seqs (16) and vLLM's --max-num-seqs share a widget (one key): the
    engine switch must write vLLM's blank through the Session State API (set_value, which the
    browser adopts; a removed key left the browser showing and sending back 16)."""
    started = []

    def start_job(spec, root):
        started.append(spec)
        raise OSError("not started in this test")

    monkeypatch.setattr("runners.app.jobs.start_job", start_job)
    app = open_launch(monkeypatch, results_dir)
    assert app.text_input(key="f:engine.max_num_seqs").value == "16"
    app.text_input(key="f:engine.kv_capacity_tokens").input("50000").run()
    app.radio(key="f:engine.kind").set_value("vllm").run()
    slots = app.text_input(key="f:engine.max_num_seqs")
    assert slots.value == "" and slots.proto.set_value, "the browser would keep showing the simulator's 16"
    app.text_input(key="f:engine.model").input(str(tmp_path)).run()
    app.text_input(key="f:engine.python").input(fake_vllm_python(tmp_path)).run()
    app.multiselect(key="schedulers").set_value(["fcfs"]).run()
    app.button(key="launch").click().run()
    assert not app.exception, app.exception
    assert len(started) == 1, [box.value for box in app.error]
    engine = started[0].runs[0].engine
    assert engine.kind == "vllm" and engine.max_num_seqs is None
    assert not {"kv_capacity_tokens", "planning_model", "preset", "pace"} & set(engine.model_dump())


def test_an_attach_form_after_a_bad_simulator_field_needs_no_attention(monkeypatch, results_dir):
    app = open_launch(monkeypatch, results_dir)
    app.text_input(key="f:engine.kv_capacity_tokens").input("lots").run()
    app.text_input(key="f:engine.max_num_seqs").input("0").run()
    app.button(key="launch").click().run()
    assert "2 field(s) need attention; each error is shown under its field." in [box.value for box in app.error]
    app.radio(key="f:engine.kind").set_value("openai").run()
    assert not app.exception, app.exception
    assert not [box.value for box in app.error if "need attention" in box.value or "KV capacity" in box.value]


def test_errors_name_the_fields_label_in_a_plain_sentence(monkeypatch, results_dir):
    app = open_launch(monkeypatch, results_dir)
    app.text_input(key="f:scheduler.slo-sa.iterations").input("abc").run()
    app.text_input(key="f:workload.requests").input("0").run()
    app.button(key="launch").click().run()
    shown = [box.value for box in app.error]
    assert "**moves per temperature**: expected a whole number from 1 to 1,000,000, got 'abc'" in shown
    assert "**Requests**: expected a whole number from 1 to 1,000,000, got '0'" in shown
    assert not [value for value in shown if "scheduler.slo-sa" in value or "Input should" in value]


@pytest.mark.parametrize(
    "item,expected",
    [
        ({"type": "float_parsing", "input": "x"}, "expected a number, got 'x'"),
        ({"type": "greater_than", "input": "-1", "ctx": {"gt": 0}}, "expected a number > 0, got '-1'"),
        (
            {"type": "literal_error", "input": "z", "ctx": {"expected": "'a' or 'b'"}},
            "expected one of 'a' or 'b', got 'z'",
        ),
        ({"type": "value_error", "msg": "Value error, needs limits", "input": None}, "needs limits"),
    ],
)
def test_form_messages_without_a_field(item, expected):
    assert form_message(item) == expected


def test_the_schedulers_the_simulator_cannot_run_are_said_once(monkeypatch, results_dir):
    note = unavailable_note("sim")
    assert note is not None and note.schedulers == [
        "engine-dynamic-mem",
        "engine-dynamic-sla",
        "engine-slo-sa",
        "engine-mcsf",
    ]
    assert note.text == (
        "Not offered with engine sim: engine-dynamic-mem, engine-dynamic-sla, engine-slo-sa, engine-mcsf: they run "
        "inside vLLM, so schedlab must launch the server (engine vllm)."
    )
    assert unavailable_note("vllm") is None
    app = open_launch(monkeypatch, results_dir)
    captions = [caption.value for caption in app.caption if "Not offered" in caption.value]
    assert captions == [note.text]  # the full reasons (four near-identical sentences) are its tooltip


def test_the_two_scls_gamma_fields_read_apart():
    slices, _ = parameter_label("scls", "min_interval_slices")
    seconds, _ = parameter_label("scls", "min_interval_s")
    assert (slices, seconds) == ("Gamma in slice times (shortest interval)", "Gamma in seconds (replaces slice times)")


def test_the_preset_name_has_half_the_row(monkeypatch, results_dir):
    """At 1,024 px a quarter of the row cut 'qwen2.5-7b-2xv100-vllm'; the preset has half of it."""
    app = open_launch(monkeypatch, results_dir)
    stack, column_of = [(app.main, None)], {}
    while stack:
        node, column = stack.pop()
        if getattr(node, "type", None) == "column":
            column = node
        if getattr(node, "key", None):
            column_of[node.key] = column
        stack += [(child, column) for child in getattr(node, "children", {}).values()]
    assert column_of["f:engine.preset"].weight == pytest.approx(0.5)


@pytest.mark.browser
def test_in_a_browser_vllm_never_shows_the_simulators_16_slots(tmp_path_factory):
    """The browser keeps a widget's value by its key: with the value only removed on the engine
    switch, vLLM's --max-num-seqs showed (and would launch) the simulator's 16. Headless Chromium
    (skipped without it, unless SCHEDLAB_REQUIRE_BROWSER=1)."""
    from tests.e2e.test_browser import _requirements

    _requirements()
    from playwright.sync_api import sync_playwright

    from tests.browser.screenshot import launch_chromium
    from tests.dashboard_server import start_dashboard, stop_dashboard

    results = tmp_path_factory.mktemp("results")
    server, url = start_dashboard(results, timeout_s=90)
    try:
        with sync_playwright() as playwright:
            chromium = launch_chromium(playwright)
            page = chromium.new_page(viewport={"width": 1024, "height": 1000})
            page.goto(f"{url}/Launch", timeout=60_000)
            simulator = page.get_by_label("max_num_seqs", exact=True)
            simulator.wait_for(timeout=60_000)
            assert simulator.input_value() == "16"
            page.get_by_text("vllm: launch vLLM").first.click()
            slots = page.get_by_label("--max-num-seqs", exact=True)
            slots.wait_for(timeout=30_000)
            page.wait_for_timeout(1500)  # the browser has drawn what the rerun sent
            assert slots.input_value() == ""
            chromium.close()
    finally:
        stop_dashboard(server, timeout_s=20)
