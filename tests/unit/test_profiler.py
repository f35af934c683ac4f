"""The profiler: exact recovery of known coefficients, and a whole profile against a test server."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from runners.app.cli import main
from runners.app.profiler import ProfileGrid, ProfileSample, PromptTokens, fit_phase, fit_profile, measure
from runners.engines.adapters.sglang import SGLangAdapter
from runners.engines.openai_client import Endpoint
from runners.engines.profile import QWEN25_7B_2XV100, load_profile
from runners.engines.server_tokens import _SERVER_COUNTERS
from runners.errors import SchedlabError
from runners.workload.synthetic import made_up_vocabulary
from runners.workload.tokens import ApproximateTokenCounter
from tests.fakes.lmdeploy_server import FakeLMDeploy
from tests.fakes.sglang_server import FakeSGLang


def test_fit_recovers_table2_coefficients_from_noise_free_points():
    truth = QWEN25_7B_2XV100.latency_model()
    batches, lengths = np.meshgrid([1, 2, 4, 8, 16, 32], [100, 500, 1000, 2000])
    b, l = batches.ravel(), lengths.ravel()
    prefill = fit_phase(b, l, [truth.prefill_time(int(x), y) for x, y in zip(b, l)])
    decode = fit_phase(b, l, [truth.decode_step_time(int(x), y) for x, y in zip(b, l)])
    for fitted, expected in [(prefill.coefficients, truth.prefill), (decode.coefficients, truth.decode)]:
        np.testing.assert_allclose(
            [fitted.alpha, fitted.beta, fitted.gamma, fitted.delta],
            [expected.alpha, expected.beta, expected.gamma, expected.delta],
            rtol=1e-6,
            atol=1e-12,
        )
    assert prefill.rmse_s < 1e-9 and decode.mape < 1e-6


def test_fit_errors_measure_noise_and_need_four_points():
    rng = np.random.default_rng(0)
    b = np.repeat([1, 2, 4, 8], 5)
    l = np.tile([10, 20, 40, 80, 160], 4)
    clean = 0.001 * b * l + 0.01
    noisy = clean * (1 + rng.normal(0, 0.05, size=clean.size))
    fit = fit_phase(b, l, noisy)
    assert 0.01 < fit.mape < 0.2 and fit.rmse_s > 0
    assert fit.coefficients.alpha == pytest.approx(0.001, rel=0.1)  # the dominant term survives the noise
    with pytest.raises(SchedlabError, match="need at least 4 measurements"):
        fit_phase([1, 2], [3, 4], [5, 6])


def test_profile_needs_kv_capacity():
    samples = [ProfileSample(b, 100.0, 10.0, 0.01 * b, 0.001 * b, 105.0) for b in (1, 2, 4, 8)]
    with pytest.raises(SchedlabError, match="did not report its KV capacity"):
        fit_profile(samples, "x", "test", None, None, None, None)
    profile = fit_profile(samples, "x", "test", 4096, 16, 8, 512)
    assert profile.kv_capacity_tokens == 4096 and profile.max_num_seqs == 8 and profile.fit["decode_points"] == 4


@pytest.fixture(scope="module")
def server():
    fake = FakeLMDeploy(token_delay_s=0.002, max_batch=16).start()
    yield fake
    fake.stop()


def test_measure_against_a_server(server):
    grid = ProfileGrid(batch_sizes=[1, 4], input_tokens=[16, 64], output_tokens=[8], repeats=1, warmup_requests=1)
    samples = asyncio.run(measure(Endpoint(server.url, server.model_name), grid))
    assert [(s.batch, s.output_tokens) for s in samples] == [(1, 8), (1, 8), (4, 8), (4, 8)]
    assert all(s.prefill_s > 0 and 0.001 < s.decode_per_token_s < 0.5 for s in samples)
    assert samples[1].input_tokens > samples[0].input_tokens  # engine-reported prompt tokens


def test_profile_command_needs_a_real_engine(tmp_path, capsys):
    assert main(["profile", "--engine", "sim", "--out", str(tmp_path / "p.yaml")]) == 2
    assert "profile needs a real engine" in capsys.readouterr().err
    assert (
        main(
            [
                "profile",
                "--engine",
                "openai",
                "--url",
                "http://127.0.0.1:9",
                "--out",
                str(tmp_path / "p.yaml"),
                "--batch-sizes",
                "0,1",
            ]
        )
        == 2
    )
    assert "--batch-sizes" in capsys.readouterr().err


def test_fitted_profile_file_loads_into_the_simulator(tmp_path):
    samples = [
        ProfileSample(b, float(l), 32.0, 0.0005 * b * l + 0.02, 0.0001 * b + 0.003, l + 16.0)
        for b in (1, 2, 4, 8)
        for l in (32, 128, 512)
    ]
    path = fit_profile(samples, "fitted", "test", 8192, 16, 32, 1024).to_file(tmp_path / "fitted.yaml")
    profile = load_profile(path)
    assert profile.prefill.alpha == pytest.approx(0.0005, rel=1e-6)
    assert profile.decode.beta == pytest.approx(0.0001, rel=1e-6)
    from runners.engines.sim_config import SimulatorConfig

    resolved = SimulatorConfig(profile=str(path)).resolve()
    assert (
        resolved.kv_capacity_tokens == 8192 and resolved.max_num_seqs == 32 and resolved.max_num_batched_tokens == 1024
    )


def test_fit_table_for_both_latency_models():
    from runners.app.profiler import fit_table

    phase = fit_table(QWEN25_7B_2XV100)
    assert (
        phase[1][:2] == ["prefill", "0.0001"] and phase[2][4] == "0.0158"
    )  # Table 2: alpha_p 0.1 ms, delta_d 15.85 ms
    samples = [
        ProfileSample(b, float(l), 32.0, 0.0005 * b * l + 0.02, 0.0001 * b + 0.003, l + 16.0)
        for b in (1, 2, 4, 8)
        for l in (32, 128, 512)
    ]
    assert fit_table(fit_profile(samples, "x", "t", 4096, 16, 8, 512))[1][-1] == "0.0%"
    from runners.engines.latency_model import LinearStepModel
    from runners.engines.profile import EngineProfile

    step = EngineProfile(
        name="s",
        kv_capacity_tokens=4096,
        step_model=LinearStepModel(
            fixed_s=0.002,
            per_prefill_token_s=1.5e-5,
            per_decode_request_s=7e-5,
            per_context_token_s=3e-8,
            per_request_cpu_s=0.0,
        ),
        fit={"cross_validation": {"mixed": {"mape": 0.294, "n": 48}}},
    )
    rows = fit_table(step)
    assert rows[1] == ["fixed_s", "0.002"] and rows[-1] == ["out-of-fold MAPE mixed", "29.4% (n=48)"]


class _Counter:
    """A tokenizer that is not 4 characters per token: ``rule(text)`` tokens per text."""

    def __init__(self, rule) -> None:
        self.rule = rule
        self.name = "test"

    def count(self, texts):
        return [self.rule(text) for text in texts]


@pytest.mark.parametrize(
    "counter",
    [
        _Counter(lambda text: len(text.split())),  # a word a token
        _Counter(lambda text: -(-len(text) // 3)),  # 3 characters a token, rounded up
        _Counter(lambda text: len(text.replace(" ", ""))),  # a character a token, spaces free
        ApproximateTokenCounter(),
    ],
)
def test_prompts_have_exact_token_counts_by_the_counter(counter):
    rng = np.random.default_rng(3)
    tokens = PromptTokens(counter, rng, made_up_vocabulary(400, rng))
    targets = [1, 7, 64, 513, 64]
    prompts = tokens.make(targets)
    assert counter.count(prompts) == targets
    assert prompts[2] != prompts[4]  # fresh words each time: no shared prefix to cache


@pytest.fixture()
def word_server():
    """SGLang's wire format with a word-per-token tokenizer and a 256-token context."""
    fake = FakeSGLang(context_length=256, token_delay_s=0.002, max_running_requests=16).start()
    yield fake
    fake.stop()
    _SERVER_COUNTERS.clear()


def test_profile_prompts_are_the_servers_tokens_and_fit_its_context(word_server):
    endpoint = SGLangAdapter.endpoint(word_server.url, "sglang-fake", "completions")
    grid = ProfileGrid(batch_sizes=[1, 2], input_tokens=[16, 200], output_tokens=[8], repeats=1, warmup_requests=1)
    samples = asyncio.run(measure(endpoint, grid))
    # usage.prompt_tokens: the text's words plus BOS; 200 * 4 characters of made-up words are ~130 words
    assert [s.input_tokens for s in samples] == [17.0, 201.0, 17.0, 201.0]
    sent = len(word_server.requests_seen)
    too_long = ProfileGrid(batch_sizes=[1], input_tokens=[16, 248], output_tokens=[8], repeats=1, warmup_requests=0)
    with pytest.raises(SchedlabError, match=r"248 \+ 8 do not fit the server's context of 256 tokens \(1 added"):
        asyncio.run(measure(endpoint, too_long))
    assert len(word_server.requests_seen) == sent  # refused before anything was sent
