"""What the command line loads before it answers (issue 28: ``--help`` and a command's own help in
<= 0.3 s whole process). Timings are noisy on a shared machine, so the check that cannot flake is
what gets imported: ``--help`` loads argparse and runners.app.cli, not pydantic, pandas, scipy,
numba or an engine; and ``bench/startup_speed.py --quick`` still runs every timed command with the
exit codes it expects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Modules a help text never needs: each costs 0.05-1 s of imports.
HEAVY = ("pydantic", "pandas", "pyarrow", "scipy", "numba", "numpy", "aiohttp", "runners.registry", "yaml")


def imported(*arguments: str, returncode: int = 0) -> set[str]:
    """The modules ``python -m runners ARGUMENTS`` imports (from ``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runners", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == returncode, done.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("arguments", [("--help",), ("list", "--help"), ("show", "--help"), ("delete", "--help")])
def test_help_loads_no_heavy_module(arguments):
    modules = imported(*arguments)
    assert "runners.app.cli" in modules
    heavy = sorted(name for name in modules if name.split(".")[0] in HEAVY or name in HEAVY)
    assert not heavy, f"{' '.join(arguments)} imports {heavy}"


def test_run_help_names_every_engine_without_importing_one():
    modules = imported("run", "--help")
    assert not any(name.startswith(("runners.engines.adapters", "runners.registry", "pydantic")) for name in modules)
    text = subprocess.run(
        [sys.executable, "-m", "runners", "run", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    from runners.engines.kinds import ENGINES

    assert f"engine kind: {' | '.join(ENGINES)}" in " ".join(text.split())


def test_an_unknown_engine_is_refused_before_the_config_models_load():
    modules = imported("run", "--engine", "nope", "--requests", "10", returncode=2)
    assert not any(name.split(".")[0] in ("pydantic", "numpy", "aiohttp") for name in modules), sorted(modules)


def test_a_simulator_run_of_fcfs_loads_no_other_policy_nor_the_http_client(tmp_path):
    """Schedulers are imported on first lookup: an FCFS simulator run loads neither slo-sa's numba
    kernels, the vLLM plugin (runners.schedulers.vllm) nor the HTTP client (aiohttp). (The run's
    modules are read from sys.modules at its end: a run's own stderr is not ``-X importtime``'s.)"""
    script = (
        "import sys\n"
        "from runners.app.cli import main\n"
        f"code = main(['run', '--requests', '20', '--quiet', '--out', {str(tmp_path)!r}])\n"
        "print(code, ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    code, modules = done.stdout.splitlines()[-1].split(" ", 1)
    names = set(modules.split())
    assert code == "0" and "runners.schedulers.fcfs" in names
    loaded = sorted(
        name
        for name in names
        if name.split(".")[0] in ("numba", "aiohttp", "scipy")
        or name.startswith(("runners.schedulers.vllm", "runners.schedulers.slo_aware", "runners.engines.openai_client"))
    )
    assert not loaded, loaded


@pytest.mark.e2e
def test_the_startup_benchmark_runs_in_quick_mode():
    done = subprocess.run(
        [sys.executable, "-m", "bench.startup_speed", "--quick"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("--help", "run --help", "refusal: run --engine nope", "sim run, 10,000 requests"):
        assert f"| {name} |" in done.stdout
    assert "beyond 100 requests" in done.stdout
