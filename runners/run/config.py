"""The run configuration: engine, workload, SLOs, scheduler. Loaded from YAML/JSON and flags;
saved whole in ``config.json`` so a run can be repeated exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from runners import paths
from runners.engines.kinds import ENGINES, engine_entry
from runners.engines.real_config import REDACT_SECRETS
from runners.engines.sim_config import SimulatorConfig
from runners.errors import ConfigError, format_validation_error
from runners.input_model import MAX_SEED, InputModel, field_error
from runners.store.run_ids import validate_run_id
from runners.workload.config import WorkloadConfig
from runners.workload.slo import SLOConfig


class SchedulerConfig(InputModel):
    """A scheduler by registry name, with its parameters (validated by the policy's Params)."""

    name: str = "fcfs"
    params: dict[str, Any] = Field(default_factory=dict)
    decide_limit_s: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="longest one call of the policy's decide may take, seconds (wall clock); a call past it "
        "fails the run with the reason, keeping what was measured. A safety net against a hung policy: "
        "'python -m runners check-scheduler' checks decide time against a budget",
    )


#: Most seeds one study may take (the run-count guard, 1,000 runs without confirmation, applies too).
MAX_STUDY_SEEDS = 10_000


class TrialsConfig(InputModel):
    """A study: every scheduler of ``schedulers`` at every seed of ``seeds`` (the workload and
    arrival seed, so at one seed all schedulers see the identical workload and arrival times),
    compared with ``baseline``. Empty lists: one run with ``scheduler`` and ``workload.seed``."""

    seeds: list[Annotated[int, Field(ge=0, le=MAX_SEED)]] = Field(
        default_factory=list,
        max_length=MAX_STUDY_SEEDS,
        description="workload seeds of the study (CLI --seeds 10 means 0..9; --seeds 3,7,11 a list)",
    )
    rates: list[Annotated[float, Field(ge=1e-6, le=1e6)]] = Field(
        default_factory=list,
        max_length=100,
        description="arrival rates of the study, requests per second (CLI --rates 4,6,8); statistics per rate",
    )
    schedulers: list[str] = Field(
        default_factory=list, max_length=64, description="schedulers of the study (default: scheduler.name alone)"
    )
    baseline: str | None = Field(
        default=None,
        min_length=1,
        description="the scheduler the others are compared with (default: the first of schedulers)",
    )
    workers: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="simulator runs of the study at once (CLI --workers; default: all cores)",
    )
    executor: Literal["serial", "process", "ray"] | None = Field(
        default=None,
        description="where the runs execute (CLI --executor): serial, process (a pool of worker "
        "processes, the default) or ray (also chosen by RAY_ADDRESS); see runners.study.executors",
    )
    member_resources: dict[
        Annotated[str, Field(min_length=1, max_length=64)], Annotated[float, Field(ge=0, le=1e6)]
    ] = Field(
        default_factory=dict,
        max_length=16,
        description="Ray resources each member of a real-engine study holds while its server runs (CLI "
        "--member-resources gpu=1): GPU (num_gpus), CPU (num_cpus) or a custom resource the cluster "
        "declares; default GPU = the engine's instances, CPU = 1; see runners.study.cluster",
    )
    servers_per_member: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="a study on attached servers as a pool (CLI --servers-per-member): engine.urls dealt out "
        "in groups of this many, one group per member at a time; see runners.study.cluster",
    )

    @field_validator("seeds", "rates", "schedulers", mode="before")
    @classmethod
    def _items_of_their_kind(cls, values: Any, info: ValidationInfo) -> Any:
        """Seeds are integers and rates numbers, never booleans or text (``true`` would run seed
        1, ``'2'`` pass as 2); schedulers are names (text)."""
        if not isinstance(values, list):
            return values
        for index, value in enumerate(values):
            if info.field_name == "schedulers":
                bad = not isinstance(value, str)
                expected = "a scheduler name (text)"
            else:
                allowed: tuple[type, ...] = (int,) if info.field_name == "seeds" else (int, float)
                bad = isinstance(value, bool) or not isinstance(value, allowed)
                expected = "an integer" if info.field_name == "seeds" else "a number (requests per second)"
            if bad:
                raise ValueError(f"item {index} is {value!r}; expected {expected}")
        return values

    @field_validator("seeds", "rates", "schedulers")
    @classmethod
    def _unique(cls, values: list[Any]) -> list[Any]:
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"each value once; repeated: {', '.join(repeated)}")
        return values


#: Any engine's config, told apart by its ``kind``: at run time a Union built from the engine
#: kinds (runners.engines.kinds, in its order); for the type checker the same classes written
#: out, which tests/unit/test_layering.py checks against the kinds.
if TYPE_CHECKING:
    from runners.engines.adapters.lmdeploy import LMDeployConfig
    from runners.engines.adapters.sglang import SGLangConfig
    from runners.engines.adapters.vllm import VLLMConfig
    from runners.engines.real_config import AttachConfig

    EngineConfig = Annotated[
        SimulatorConfig | VLLMConfig | LMDeployConfig | SGLangConfig | AttachConfig, Field(discriminator="kind")
    ]
else:
    # the X | Y form cannot take a computed tuple
    EngineConfig = Annotated[Union[tuple(entry.config for entry in ENGINES.values())], Field(discriminator="kind")]  # noqa: UP007


#: Most time-series samples a run may take per instance (max_duration_s / sample_interval_s):
#: each is a row held in memory until flushed and then a parquet row. The defaults (one day at
#: 0.25 s) take 345,600; 0.01 s is allowed for runs up to 10,000 s (27.8 h at 0.01 s is too many).
MAX_SAMPLES = 10_000_000


class RunConfig(InputModel):
    """One benchmark run."""

    run_id: str | None = None
    engine: EngineConfig = Field(default_factory=SimulatorConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    slo: SLOConfig = Field(default_factory=SLOConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    trials: TrialsConfig = Field(default_factory=TrialsConfig)
    sample_interval_s: float = Field(
        default=0.25,
        ge=0.01,
        le=3600.0,
        description="telemetry sampling period, seconds (at least 0.01 s: every sample is a row, and a real "
        "engine's metrics endpoint is scraped once per sample)",
    )
    max_duration_s: float = Field(
        default=86_400.0,
        gt=0,
        le=30 * 86_400.0,
        description="stop the run (as failed) after this long, seconds; virtual on the simulator; at most 30 days",
    )
    max_error_rate: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="failure gate: the run ends 'failed' (exit code 1) when more than this fraction of its "
        "requests failed (errors among the requests that ran; cancelled or never-sent ones do not "
        "count). 0.5 by default: a run where most requests failed measures the failures, not the "
        "scheduler; 1 turns the gate off",
    )
    notes: str = ""
    sweep_id: str | None = Field(default=None, description="groups the runs of one rate sweep (dashboard)")

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        return validate_run_id(value) if value is not None else None

    @model_validator(mode="after")
    def _bounded_samples(self) -> "RunConfig":
        samples = self.max_duration_s / self.sample_interval_s
        if samples > MAX_SAMPLES:
            raise field_error(
                "RunConfig",
                "sample_interval_s",
                f"max_duration_s / sample_interval_s is {samples:,.0f} "
                f"samples per instance; expected at most {MAX_SAMPLES:,}: raise sample_interval_s or "
                "lower max_duration_s",
                self.sample_interval_s,
            )
        return self


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
    except RecursionError:
        raise ConfigError("config", "nested too deeply to be a run config") from None
    # the policies load here, when a config is checked, not when this module is imported
    from runners.registry import make_policy, scheduler_params

    if config.trials.schedulers:  # a study: each scheduler takes the parameters it has
        for name in config.trials.schedulers:
            make_policy(name, scheduler_params(name, config.scheduler.params, config.trials.schedulers))
    else:
        make_policy(config.scheduler.name, config.scheduler.params)  # validates name and params now
    return config


def config_record(config: RunConfig) -> dict[str, Any]:
    """The config as it is written to results (config.json): the values of secret-looking
    ``engine.env`` variables and ``engine.extra_args`` are replaced by ``***``; the model
    itself keeps the real values, which only ever reach the launched servers."""
    return config.model_dump(mode="json", context=REDACT_SECRETS)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML (``.yaml``/``.yml``) or JSON config file as a mapping."""
    file = Path(path)
    if not paths.is_file(file):
        raise ConfigError("--config", f"{file} not found (expected a YAML or JSON run config)")
    kind = "JSON" if file.suffix == ".json" else "YAML"
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "--config", f"{file} is not UTF-8 text (byte {exc.start}); expected a {kind} run config"
        ) from None
    except OSError as exc:
        raise ConfigError("--config", f"{file} could not be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError("--config", f"{file} is not valid {kind}: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError("--config", f"{file} is nested too deeply to be a run config") from None
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
