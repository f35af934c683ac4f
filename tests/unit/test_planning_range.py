"""Issue 43, item 11: a policy's planning model is judged over the range the run uses, not only on
the profiling grid, and an unvalidated preset says so in `runners run` and `runners show`."""

from __future__ import annotations

import pytest

from runners.app.cli import main
from runners.engines.beliefs import describe, run_beliefs
from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.engines.planning_model import run_range_error
from runners.engines.profile import QWEN25_7B_2XV100

TRUTH = LatencyModel(
    prefill=PhaseCoefficients(alpha=1e-7, beta=2e-3, gamma=1e-5, delta=0.02),
    decode=PhaseCoefficients(alpha=2e-9, beta=3e-4, gamma=1e-6, delta=0.015),
)


def scaled(model: LatencyModel, factor: float) -> LatencyModel:
    def times(phase: PhaseCoefficients) -> PhaseCoefficients:
        return PhaseCoefficients(
            alpha=phase.alpha * factor, beta=phase.beta * factor, gamma=phase.gamma * factor, delta=phase.delta * factor
        )

    return LatencyModel(prefill=times(model.prefill), decode=times(model.decode))


def test_a_model_10_percent_slow_everywhere_is_10_percent_off_over_any_range():
    found = run_range_error(scaled(TRUTH, 1.1), TRUTH, max_batch=256, max_prompt_tokens=1024)
    assert found["error_prefill"] == pytest.approx(0.10)
    assert found["error_decode"] == pytest.approx(0.10)
    assert found["extrapolated"]  # 256 slots and 1,024-token prompts: beyond batch 16 and 512 tokens
    inside = run_range_error(TRUTH, TRUTH, max_batch=16, max_prompt_tokens=512)
    assert inside["error_prefill"] == 0 and inside["error_decode"] == 0 and not inside["extrapolated"]


def test_a_model_right_on_the_grid_can_be_wrong_beyond_it():
    """The same model with one term changed (the per-request decode cost alpha x b x l, which is
    small at batch 16 and 512 tokens): its error over a run of 256 slots is larger than over the grid."""
    truth = TRUTH
    off = LatencyModel(
        prefill=truth.prefill,
        decode=PhaseCoefficients(
            alpha=truth.decode.alpha * 3, beta=truth.decode.beta, gamma=truth.decode.gamma, delta=truth.decode.delta
        ),
    )
    grid = run_range_error(off, truth, max_batch=16, max_prompt_tokens=512)
    wide = run_range_error(off, truth, max_batch=256, max_prompt_tokens=1024)
    assert wide["error_decode"] > 2 * grid["error_decode"] and wide["error_prefill"] == 0


def test_run_and_show_say_the_preset_is_not_validated_and_where_the_error_is_extrapolated(tmp_path, capsys):
    argv = ["run", "--engine", "sim", "--scheduler", "slo-sa", "--requests", "20", "--quiet"]
    assert main([*argv, "--out", str(tmp_path), "--run-id", "preset"]) == 0
    out = capsys.readouterr().out
    assert f"simulated with profile {QWEN25_7B_2XV100.name}: paper coefficients, not validated here" in out
    assert "over this run's range (batches up to 256, prompts up to " in out
    assert "extrapolated beyond the profiling grid (batches 1-16, prompts 32-512 tokens)" in out
    record = run_beliefs(tmp_path / "preset")["latency_model"]["value"]["run_range"]
    assert record["max_batch"] == 256 and record["extrapolated"]
    assert any("over this run's range" in line for line in describe(run_beliefs(tmp_path / "preset")))
    assert main(["show", "preset", "--out", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "paper coefficients, not validated here" in shown and "over this run's range" in shown
