"""The run configuration: engine, workload, SLOs, scheduler. Loaded from YAML/JSON and flags;
saved whole in ``config.json`` so a run can be repeated exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runners.engines.real_config import AttachConfig, LMDeployConfig, VLLMConfig
from runners.engines.simulator import SimulatorConfig
from runners.errors import ConfigError, format_validation_error
from runners.registry import engine_entry, make_policy
from runners.result_store import validate_run_id
from runners.workload.builder import WorkloadConfig
from runners.workload.slo import SLOConfig


class SchedulerConfig(BaseModel):
    """A scheduler by registry name, with its parameters (validated by the policy's Params)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "fcfs"
    params: dict[str, Any] = Field(default_factory=dict)


EngineConfig = Annotated[
    Union[SimulatorConfig, VLLMConfig, LMDeployConfig, AttachConfig], Field(discriminator="kind")
]


class RunConfig(BaseModel):
    """One benchmark run."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None
    engine: EngineConfig = Field(default_factory=SimulatorConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    slo: SLOConfig = Field(default_factory=SLOConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    sample_interval_s: float = Field(default=0.25, gt=0, description="telemetry sampling period, seconds")
    max_duration_s: float = Field(
        default=86_400.0, gt=0, description="stop the run (as failed) after this long, seconds; virtual on the simulator"
    )
    notes: str = ""
    sweep_id: str | None = Field(default=None, description="groups the runs of one rate sweep (dashboard)")

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        return validate_run_id(value) if value is not None else None


def parse_config(data: dict[str, Any]) -> RunConfig:
    """Validate a config mapping; ConfigError names each bad field and what was expected."""
    if not isinstance(data, dict):
        raise ConfigError("config", f"expected a mapping at the top level, got {type(data).__name__}")
    engine = data.get("engine")
    if isinstance(engine, dict):
        engine_entry(str(engine.get("kind", "sim")))
        if "kind" not in engine:
            data = {**data, "engine": {**engine, "kind": "sim"}}
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("config", format_validation_error(exc)) from exc
    make_policy(config.scheduler.name, config.scheduler.params)  # validates name and params now
    return config


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML (``.yaml``/``.yml``) or JSON config file as a mapping."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError("--config", f"{file} not found (expected a YAML or JSON run config)")
    text = file.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError("--config", f"{file} is not valid {'JSON' if file.suffix == '.json' else 'YAML'}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("--config", f"{file} must hold a mapping (engine:, workload:, slo:, scheduler:)")
    return data


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data['a']['b'] = value`` for ``dotted = 'a.b'``, creating mappings on the way."""
    keys = dotted.split(".")
    target = data
    for key in keys[:-1]:
        existing = target.get(key)
        if not isinstance(existing, dict):
            existing = {}
            target[key] = existing
        target = existing
    target[keys[-1]] = value
