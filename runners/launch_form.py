"""Turning the Launch page's fields into run configs, with every error tied to its field.

The page holds flat values keyed by dotted config paths (``workload.requests``,
``engine.max_num_seqs``, ``scheduler.slo-sa.max_batch`` ...). :func:`build_job` assembles them
into one :class:`RunConfig` per scheduler (or per scheduler x rate for a sweep), validates them
with the same models the CLI uses, and returns errors keyed by those same paths, so the page can
show each one under its widget. Blank values (None or "") mean "the default".
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runners.benchmark import prepare_run
from runners.config import RunConfig, set_dotted
from runners.errors import ConfigError, DatasetError, SchedlabError, error_location
from runners.jobs import JobSpec, SweepSpec, new_job_spec
from runners.registry import scheduler_class
from runners.result_store import DEFAULT_RESULTS_DIR

UPLOADS_FOLDER = ".uploads"
LIST_FIELDS = {"engine.gpus", "engine.urls"}
ARGS_FIELDS = {"engine.extra_args"}


@dataclass
class FormResult:
    """A validated job (``spec``), or the errors by dotted field; ``general`` holds errors that
    belong to no single field."""

    spec: JobSpec | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.spec is not None and not self.errors


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _float_list(text: str, key: str, errors: dict[str, str]) -> list[float]:
    values = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        try:
            number = float(part)
        except ValueError:
            errors[key] = f"{part!r} is not a number; expected rates in req/s separated by commas, e.g. 1, 2, 4"
            return []
        if number <= 0:
            errors[key] = f"{part} is not > 0; every rate must be a positive number of requests per second"
            return []
        values.append(number)
    if not values:
        errors[key] = "expected at least one rate (req/s), e.g. 1, 2, 4"
    return sorted(set(values))


def _nested(values: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in values.items():
        if _blank(value) or key.startswith(("scheduler.", "sweep.", "job.")):
            continue
        if key in LIST_FIELDS and isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif key in ARGS_FIELDS and isinstance(value, str):
            try:  # split like a shell would quote, but nothing is ever run through a shell
                value = shlex.split(value)
            except ValueError as exc:
                errors[key] = f"cannot split into arguments ({exc}); quote arguments with spaces"
                continue
        set_dotted(data, key, value)
    return data


def _error_key(loc: tuple[Any, ...]) -> str:
    return error_location(loc) or "config"


def _message(item: dict[str, Any]) -> str:
    message = str(item.get("msg", "invalid value")).removeprefix("Value error, ")
    value = item.get("input")
    if value is not None and not isinstance(value, (dict, list)):
        message += f" (got {value!r})"
    return message


def _scheduler_params(name: str, values: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    prefix = f"scheduler.{name}."
    params = {key[len(prefix):]: value for key, value in values.items()
              if key.startswith(prefix) and not _blank(value)}
    try:
        scheduler_class(name).Params.model_validate(params)
    except ValidationError as exc:
        for item in exc.errors():
            errors[prefix + _error_key(item.get("loc", ()))] = _message(item)
    return params


def _dataset_error_key(exc: DatasetError, data: dict[str, Any]) -> str:
    workload = data.get("workload", {})
    for task in ("chat", "code"):
        source = workload.get(task, {})
        if exc.source in (source.get("path"), source.get("hub_id")) or exc.source.endswith(f"{task}"):
            return f"workload.{task}.{'hub_id' if source.get('kind') == 'hub' else 'path'}"
    return "workload"


def build_job(values: dict[str, Any], schedulers: list[str], check_workload: bool = True) -> FormResult:
    """Validate the form and build the job; nothing is started here.

    ``values``: dotted field -> value (see module doc); ``sweep.enabled`` (bool),
    ``sweep.rates`` (text "1, 2, 4") and ``sweep.target`` (0-1) make a rate sweep;
    ``job.label`` names the job. ``check_workload`` also builds the workload once, so a
    malformed dataset file or an impossible SLO preset is reported before launch."""
    errors: dict[str, str] = {}
    if not schedulers:
        errors["schedulers"] = "choose at least one scheduler"
    data = _nested(values, errors)
    params = {name: _scheduler_params(name, values, errors) for name in schedulers}
    sweep = None
    rates: list[float | None] = [None]
    if values.get("sweep.enabled"):
        rates = list(_float_list(str(values.get("sweep.rates") or ""), "sweep.rates", errors))
        if data.get("workload", {}).get("arrival", {}).get("process") in ("all-at-once", "replay"):
            errors["workload.arrival.process"] = "a rate sweep needs a rate-driven arrival process (poisson, gamma " \
                                                 "or constant)"
        try:
            if rates:
                sweep = SweepSpec(rates_rps=rates, target_attainment=float(values.get("sweep.target") or 0.9))
        except ValidationError as exc:
            errors["sweep.target"] = "; ".join(_message(item) for item in exc.errors())
    if not rates:
        rates = [None]
    sweep_id = None
    if sweep is not None:
        digest = hashlib.sha1(repr(sorted(values.items(), key=str)).encode()).hexdigest()[:6]
        sweep_id = f"sweep-{digest}"
    configs: list[RunConfig] = []
    for rate in rates:
        for name in schedulers or ["fcfs"]:
            config = {**copy.deepcopy(data), "scheduler": {"name": name, "params": params.get(name, {})}}
            if rate is not None:
                config["sweep_id"] = sweep_id
                set_dotted(config, "workload.arrival.rate", rate)
            try:
                configs.append(RunConfig.model_validate(config))
            except ValidationError as exc:
                for item in exc.errors():
                    errors.setdefault(_error_key(item.get("loc", ())), _message(item))
                return FormResult(errors=errors)
    if errors or not configs:
        return FormResult(errors=errors or {"schedulers": "choose at least one scheduler"})
    if check_workload:
        try:
            prepare_run(configs[0])
        except ConfigError as exc:
            errors[exc.field] = exc.message
        except DatasetError as exc:
            errors[_dataset_error_key(exc, data)] = str(exc)
        except SchedlabError as exc:
            errors["workload"] = str(exc)
        if errors:
            return FormResult(errors=errors)
    label = str(values.get("job.label") or "") or " vs ".join(schedulers)
    return FormResult(spec=new_job_spec(configs, label=label, sweep=sweep))


def save_upload(name: str, data: bytes, results_root: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """Keep an uploaded dataset under ``results/.uploads/`` (named by content hash) and return
    its path, for a ``workload.<task>.path`` of kind 'file'."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name) or "upload.jsonl"
    folder = Path(results_root) / UPLOADS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:12]}-{safe}"
    if not path.exists():
        path.write_bytes(data)
    return path
