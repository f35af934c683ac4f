"""Dependencies point one way (issue 16): a run config loads without the scheduling policies,
numba or the result store; runners never imports streamlit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def modules_after(statement: str) -> set[str]:
    """The modules loaded by a fresh interpreter after running ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_a_config_loads_without_policies_numba_or_the_result_store():
    loaded = modules_after(
        "from runners.run.config import RunConfig, read_config_file\n"
        "RunConfig.model_validate({'workload': {'requests': 3}})"
    )
    assert "runners.run.config" in loaded
    for module in ("numba", "runners.schedulers", "runners.registry", "runners.store.result_store", "pandas"):
        assert module not in loaded, f"importing the config loaded {module}"


def test_checking_a_config_loads_the_policies_then():
    loaded = modules_after("from runners.run.config import parse_config\nparse_config({'workload': {'requests': 3}})")
    assert "runners.schedulers.fcfs" in loaded  # make_policy validates the scheduler's parameters


def test_runners_never_imports_streamlit():
    loaded = modules_after(
        "import runners.app.cli, runners.registry, runners.run.benchmark, runners.views.charts, runners.study.runner"
    )
    assert "streamlit" not in loaded


def test_the_type_checkers_engine_union_lists_the_engine_kinds():
    """config.EngineConfig is written out for mypy; at run time it is built from the kinds."""
    import typing

    from runners.engines.adapters.lmdeploy import LMDeployConfig
    from runners.engines.adapters.sglang import SGLangConfig
    from runners.engines.adapters.vllm import VLLMConfig
    from runners.engines.kinds import ENGINES
    from runners.engines.real_config import AttachConfig
    from runners.engines.sim_config import SimulatorConfig
    from runners.run.config import RunConfig

    written = {SimulatorConfig, VLLMConfig, LMDeployConfig, SGLangConfig, AttachConfig}  # as in config.py
    assert {entry.config for entry in ENGINES.values()} == written
    annotation = RunConfig.model_fields["engine"].annotation
    assert set(typing.get_args(annotation)) == written


def test_the_home_page_and_the_package_description_name_every_engine():
    """Each engine kind's own name, as its summary writes it (``launch vLLM ...``), appears in
    app.py's introduction and pyproject's description; the simulator and attaching by URL too."""
    import re

    from runners.engines.adapters import ADAPTERS

    names = {
        name: re.search(r"launch (\S+)", adapter.summary)[1]  # type: ignore[index]
        for name, adapter in ADAPTERS.items()
        if adapter.config is not None
    }
    assert set(names.values()) == {"vLLM", "LMDeploy", "SGLang"}
    app = (ROOT / "app.py").read_text()
    description = next(
        line for line in (ROOT / "pyproject.toml").read_text().splitlines() if line.startswith("description")
    )
    for text in (app, description):
        for name in [*names.values(), "simulator", "OpenAI-compatible"]:
            assert name in text, f"{name} missing"
