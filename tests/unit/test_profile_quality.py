"""The step profiler's quality gate (issue 48, item 4): repeats by their median, outliers flagged,
each phase judged on its fit error, the probe's repeatability and the other processes' CPU, with
the cause named; and the committed quiet profile's own samples pass it."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import numpy as np
import pytest

from bench.common import RESULTS
from runners.app.profile_quality import (
    OUTLIER_MAX_SHARE,
    MachineLoad,
    Probe,
    judge_phase,
    median_of_repeats,
    outliers,
    repeatability,
    server_processes,
)
from runners.app.profiler import StepSample, fit_step_profile, read_step_samples, robust_steps
from runners.engines.profile import quality_note
from runners.engines.real_config import ProfileGate

GATE = ProfileGate()


def prefill(tokens: int, seconds: float) -> StepSample:
    return StepSample("prefill", 1, tokens, 0, 0, seconds, "engine request_prefill_time")


def test_repeats_of_one_grid_point_become_their_median_in_order():
    samples = [prefill(128, 0.010), prefill(256, 0.020), prefill(128, 0.030), prefill(128, 0.012)]
    merged = median_of_repeats(samples)
    assert [(s.prefill_tokens, s.seconds) for s in merged] == [(128, 0.012), (256, 0.020)]


def test_an_outlier_far_beyond_the_rest_is_flagged_and_a_uniform_error_is_not():
    measured = np.full(20, 0.010)
    predicted = np.full(20, 0.0105)  # every step 5% off
    predicted[7] = 0.040  # one 300% off
    assert outliers(predicted, measured).tolist() == [7]
    assert outliers(np.full(20, 0.014), measured).tolist() == []  # 40% everywhere: a bad model, not an outlier
    wild = np.full(10, 0.0105)
    wild[[1, 4, 8]] = [0.05, 0.09, 0.07]  # three of ten: at most 10% flagged, the worst first
    assert outliers(wild, np.full(10, 0.010)).tolist() == [4][: int(OUTLIER_MAX_SHARE * 10)]


def probes(decode_gaps: list[float], prefills: list[float] | None = None, load: float = 0.5) -> list[Probe]:
    prefills = prefills or [0.005] * len(decode_gaps)
    return [Probe(float(i), p, d, load) for i, (p, d) in enumerate(zip(prefills, decode_gaps))]


def test_a_noisy_phase_names_the_other_processes_and_the_probe():
    # decode gaps 10, 10, 10, 20 ms: mean 12.5, population std 4.33 -> CV 34.6%
    load = {"cores": 2, "other_cores": 1.33, "others_include_server": False}
    verdict = judge_phase("decode", 0.20, probes([0.010, 0.010, 0.010, 0.020]), load, GATE)
    assert verdict.probe_cv == pytest.approx(math.sqrt(1.875e-5) / 0.0125)
    assert not verdict.passed and verdict.noisy
    assert verdict.line() == (
        "decode phase: other processes used 1.33 of 2 cores, over 0.25 (engine.profile_gate.max_other_cores): "
        "a noisy machine (probe CV 35%, other processes 1.33 cores)"
    )


def test_a_varying_probe_names_the_cause_but_fails_nothing_by_itself():
    """On a quiet machine the probe varied 27-42% within phases of the default grid: its CV is
    evidence for the cause of a failing phase, not a reason to refuse a phase that fits."""
    quiet = {"cores": 2, "other_cores": 0.02, "others_include_server": False}
    fits = judge_phase("decode", 0.11, probes([0.010, 0.010, 0.010, 0.020]), quiet, GATE)
    assert fits.passed and not fits.noisy  # other processes were counted: the probe names no cause
    assert not judge_phase("decode", 0.50, probes([0.010, 0.010, 0.010, 0.020]), quiet, GATE).noisy
    remote = judge_phase("decode", 0.50, probes([0.010, 0.010, 0.010, 0.020]), None, GATE)  # server elsewhere
    assert remote.line() == (
        "decode phase: out-of-fold error 50% over 45% (engine.profile_gate.max_error): a noisy machine (probe CV 35%)"
    )


def test_a_bad_fit_on_a_quiet_machine_blames_the_model():
    load = {"cores": 2, "other_cores": 0.0, "others_include_server": False}
    verdict = judge_phase("mixed", 0.52, probes([0.010, 0.0102, 0.0099]), load, GATE)
    assert not verdict.passed and not verdict.noisy
    assert verdict.line().startswith("mixed phase: out-of-fold error 52% over 45% (engine.profile_gate.max_error): ")
    assert verdict.line().endswith("the linear step model does not fit this engine's mixed steps")


def test_other_processes_are_not_judged_where_the_server_was_not_found():
    load = {"cores": 2, "other_cores": 1.9, "others_include_server": True}  # the server's own CPU among them
    verdict = judge_phase("prefill", 0.10, probes([0.010, 0.010, 0.010]), load, GATE)
    assert verdict.passed and verdict.other_cores is None


def test_two_probes_are_too_few_to_judge_repeatability():
    verdict = judge_phase("prefill", 0.10, probes([0.010, 0.030]), None, GATE)
    assert verdict.probe_cv is None and verdict.passed


def test_repeatability_reports_spread_and_peak_load():
    report = repeatability(probes([0.010, 0.020, 0.015], load=3.5))
    assert report["decode"]["spread"] == pytest.approx(2.0)
    assert report["decode"]["median_s"] == pytest.approx(0.015)
    assert report["peak_load_average"] == 3.5 and report["probes"] == 3


def test_the_committed_quiet_profiles_samples_pass_the_gates_fit_threshold():
    samples = read_step_samples(RESULTS / "tiny-cpu-vllm.profile-samples.csv")
    profile = fit_step_profile(samples, "quiet", "committed samples", 4096, 16, 64, 2048)
    cv = profile.fit["cross_validation"]
    for kind in ("prefill", "decode", "mixed"):
        assert cv[kind]["mape"] < GATE.max_error, kind
    robust = profile.fit["robust"]
    assert robust["measured_steps"] == sum(s.kind in ("prefill", "decode", "mixed") for s in samples)


def test_one_wild_step_is_flagged_and_barely_moves_the_fit():
    steps = ("prefill", "decode", "mixed")
    samples = [s for s in read_step_samples(RESULTS / "tiny-cpu-vllm.profile-samples.csv") if s.kind in steps]
    decode_at = next(i for i, s in enumerate(samples) if s.kind == "decode")
    wild = list(samples)
    wild[decode_at] = replace(samples[decode_at], seconds=samples[decode_at].seconds * 20)
    kept, flagged = robust_steps(wild)
    assert any(f["kind"] == "decode" and f["seconds"] == pytest.approx(wild[decode_at].seconds) for f in flagged)
    clean = fit_step_profile(samples, "c", "", 4096, 16, 64, 2048).step_model
    noisy = fit_step_profile(wild, "n", "", 4096, 16, 64, 2048).step_model
    assert noisy.per_decode_request_s == pytest.approx(clean.per_decode_request_s, rel=0.05)


def test_quality_notes_say_noisy_passed_or_before_the_gate():
    fit = {"cross_validation": {"prefill": {"mape": 0.15}, "decode": {"mape": 2.43}, "mixed": {"mape": 0.63}}}
    noisy = {"accepted_noisy": True, "passed": False, "failed": {"decode": "...", "mixed": "..."}}
    assert quality_note(fit, noisy) == (
        "fit error (out of fold) prefill 15%, decode 243%, mixed 63%; NOISY profile: failed the quality gate "
        "(decode, mixed), written with --accept-noisy"
    )
    assert quality_note(fit, {"passed": True}).endswith("; passed the quality gate")
    assert quality_note(fit, None).endswith("; made before the quality gate")


def test_machine_load_counts_a_busy_child_as_another_process():
    import subprocess
    import sys
    import time

    load = MachineLoad("http://127.0.0.1:9").start()  # nothing listens there: no server found
    spinner = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass"]
    )
    spinner.wait()
    time.sleep(0.05)
    found = load.finish()
    assert found["server_cpu_s"] is None and found["others_include_server"]
    assert found["other_cpu_s"] >= 0.7  # the spinner's second of CPU (children of this process are not its own)
    assert found["cores"] == (os.cpu_count() or 1)


def test_the_server_is_found_by_its_port(tmp_path):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        # this process listens: it is not counted as the server (the profiler is its own process)
        assert server_processes(f"http://127.0.0.1:{port}") == []
        assert server_processes("http://gpu-box.example:8000") == []
    finally:
        listener.close()


def test_a_machine_busy_before_profiling_is_refused_before_anything_is_measured(tmp_path):
    import socket
    import subprocess
    import sys

    from runners.app.profile_gate import BusyMachine, quiet_check

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for _ in range(100):  # until the server listens
            if server_processes(f"http://127.0.0.1:{port}"):
                break
            time.sleep(0.05)
        with pytest.raises(BusyMachine) as refused:
            quiet_check(f"http://127.0.0.1:{port}", GATE, seconds=1.5)
        message = str(refused.value)
        assert message.startswith("profile: not started: other processes used ")
        assert "(engine.profile_gate.max_other_cores)" in message and "nothing was measured" in message
        # the server itself is not "other": its CPU is counted apart
        load = quiet_check(f"http://127.0.0.1:{port}", ProfileGate(max_other_cores=8), seconds=0.5)
        assert load["server_cpu_s"] is not None and not load["others_include_server"]
    finally:
        for process in [*loops, server]:
            process.kill()
            process.wait()


def test_a_quiet_phase_failing_beside_noisy_ones_names_the_shared_fit():
    from runners.app.profile_quality import with_shared_noise

    quiet = {"cores": 2, "other_cores": 0.02, "others_include_server": False}
    busy = {"cores": 2, "other_cores": 1.6, "others_include_server": False}
    steady = probes([0.010, 0.0101, 0.0099])
    verdicts = with_shared_noise(
        [
            judge_phase("prefill", 1.86, steady, quiet, GATE),
            judge_phase("decode", 0.50, steady, busy, GATE),
            judge_phase("mixed", 0.42, steady, busy, GATE),
        ]
    )
    assert verdicts[0].shared_with == ("decode", "mixed")
    assert (
        verdicts[0]
        .line()
        .endswith(
            "but the step model it is predicted with is fitted on the steps of the noisy decode and mixed phases too"
        )
    )
    assert verdicts[1].shared_with == () and verdicts[1].noisy
