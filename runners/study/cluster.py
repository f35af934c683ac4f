"""Real-engine studies beyond one server: members placed on a Ray cluster, each owning the server
it launches, or dealt out over a pool of attached servers.

On Ray (``--executor ray``, or ``RAY_ADDRESS`` set), each member of a study on a launched engine
(vLLM, SGLang, LMDeploy) is a Ray task that holds :func:`member_resources` while it runs: by
default ``num_gpus`` = the engine's instances and one CPU, or what ``trials.member_resources``
names (``GPU``, ``CPU``, or a custom resource the cluster declares, e.g. ``{"gpu": 1}`` on
machines whose GPUs Ray does not manage). On the node it lands on it launches its own servers
(given the GPUs Ray assigned it: :func:`placed`), runs, stops them and writes its run; a reaper
stops its servers if its worker dies (runners.engines.reaper). Members run as many at once as
the cluster's resources allow (:func:`slots`).

Where its run folder goes: when the node sees the study's own study.json at the results folder's
path (a local Ray, or a folder shared by every node), straight there; otherwise into a scratch
folder on the node, sent back whole to the head when the member ends and put in place atomically
(:func:`pack_folder`, :func:`land_folder`). A member whose node is lost is a failed member: with
a shared folder its rows so far stay; sent back, they are lost with the node.

On a pool (``trials.servers_per_member``), an attached engine's ``engine.urls`` are cut into
groups of that many; each member gets one free group (:func:`pooled`), its servers' prefix caches
emptied first where the engine allows it (runners.engines.cache_reset), and as many members run at
once as there are groups.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import socket
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners.errors import ConfigError, SchedlabError

if TYPE_CHECKING:
    from runners.study.plan import StudyMember, StudyPlan

#: The resource names Ray takes as keyword arguments rather than custom resources.
RAY_BUILTIN = {"CPU": "num_cpus", "GPU": "num_gpus"}
#: Where a member sent back to the head waits before it is renamed into place.
ARRIVING = ".{run_id}.arriving"


def launches_servers(plan: "StudyPlan") -> bool:
    """Whether the plan's members launch their own servers (not the simulator, not attached)."""
    kinds = {member.config.engine.kind for member in plan.members}
    return bool(kinds) and not kinds & {"sim", "openai"}


def member_resources(plan: "StudyPlan") -> dict[str, float]:
    """What each member holds on Ray: ``trials.member_resources`` over the default of one CPU and,
    for a launched engine, ``GPU`` = its instances (a CPU build: name a custom resource instead)."""
    config = plan.config if plan.config is not None else plan.members[0].config
    resources: dict[str, float] = {"CPU": 1.0}
    if launches_servers(plan) and not config.trials.member_resources:
        resources["GPU"] = float(getattr(config.engine, "instances", 1))
    resources.update(config.trials.member_resources)
    return resources


def ray_options(resources: Mapping[str, float]) -> dict[str, Any]:
    """``ray.remote`` options for ``resources``: CPU and GPU as num_cpus / num_gpus, the rest
    as custom resources."""
    options: dict[str, Any] = {"num_cpus": resources.get("CPU", 1.0), "num_gpus": resources.get("GPU", 0.0)}
    custom = {name: amount for name, amount in resources.items() if name not in RAY_BUILTIN}
    if custom:
        options["resources"] = custom
    return options


def slots(cluster: Mapping[str, float], resources: Mapping[str, float]) -> int:
    """How many members holding ``resources`` fit in a cluster of ``cluster`` (Ray's
    cluster_resources()). SchedlabError naming the resource when not even one fits (a member
    would wait for ever)."""
    fits = []
    for name, amount in resources.items():
        if amount <= 0:
            continue
        total = float(cluster.get(name, 0.0))
        if total < amount:
            have = ", ".join(
                f"{key}={value:g}" for key, value in sorted(cluster.items()) if not key.startswith("node:")
            )
            raise SchedlabError(
                f"--member-resources: each member needs {name}={amount:g} but the Ray cluster has "
                f"{name}={total:g} ({have}); start Ray with that resource (ray start --resources "
                f"'{{\"{name}\": N}}', or --num-gpus) or name one it has"
            )
        fits.append(math.floor(total / amount + 1e-9))
    return max(min(fits, default=1), 1)


def check_placeable(plan: "StudyPlan") -> None:
    """ConfigError for a launched-engine study that cannot run its members side by side on Ray:
    fixed ports (two members on one node would take the same)."""
    config = plan.config if plan.config is not None else plan.members[0].config
    ports = getattr(config.engine, "ports", None)
    if ports:
        raise ConfigError(
            "engine.ports",
            f"{ports}: members that run side by side on one node would take the same ports; leave "
            "ports unset on Ray (each member's servers take free ports)",
        )


def placed(member: "StudyMember", gpu_ids: list[str]) -> "StudyMember":
    """``member`` with its servers given the GPUs Ray assigned its task (``gpu_ids``), split evenly
    over its instances; unchanged without GPUs or when the engine sets no CUDA_VISIBLE_DEVICES."""
    from dataclasses import replace

    engine = member.config.engine
    instances = int(getattr(engine, "instances", 1))
    if not gpu_ids or not getattr(engine, "use_gpus", False) or len(gpu_ids) % instances:
        return member
    per = len(gpu_ids) // instances
    gpus = [",".join(gpu_ids[i * per : (i + 1) * per]) for i in range(instances)]
    config = member.config.model_copy(update={"engine": engine.model_copy(update={"gpus": gpus})})
    return replace(member, config=config)


def where_here() -> str:
    """The machine a member runs on, as the study records it: the hostname."""
    return socket.gethostname()


# -- a pool of attached servers --------------------------------------------------------------------
def pool_groups(plan: "StudyPlan") -> list[list[str]]:
    """The attached servers cut into groups of ``trials.servers_per_member``; [] when the study
    has no pool. ConfigError when the engine is not attached or the servers do not divide."""
    config = plan.config if plan.config is not None else plan.members[0].config
    size = config.trials.servers_per_member
    if size is None:
        return []
    urls = list(getattr(config.engine, "urls", []) or [])
    if config.engine.kind != "openai":
        raise ConfigError(
            "trials.servers_per_member",
            f"a pool deals out attached servers (--engine openai --url ...); this study launches {config.engine.kind}",
        )
    if len(urls) % size:
        raise ConfigError(
            "trials.servers_per_member",
            f"{size} does not divide the {len(urls)} servers of engine.urls; expected groups of equal size",
        )
    return [urls[index : index + size] for index in range(0, len(urls), size)]


def pooled(member: "StudyMember", group: list[str]) -> "StudyMember":
    """``member`` sent to the servers of ``group`` (its ``engine.urls``)."""
    from dataclasses import replace

    engine = member.config.engine.model_copy(update={"urls": list(group)})
    return replace(member, config=member.config.model_copy(update={"engine": engine}))


def reset_group(member: "StudyMember") -> str | None:
    """Empty the prefix caches of ``member``'s attached servers before it runs; None when done,
    else why not (one sentence per server that could not be emptied)."""
    from runners.engines.cache_reset import reset_prefix_cache

    engine = member.config.engine
    headers = {}
    secret = getattr(engine, "api_key", None)
    key = secret.get_secret_value() if secret is not None else None
    key_env = getattr(engine, "api_key_env", None)
    if key is None and key_env:
        key = os.environ.get(key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    urls: list[str] = list(getattr(engine, "urls", None) or [])
    problems = [problem for url in urls if (problem := reset_prefix_cache(url, headers)) is not None]
    return "; ".join(problems) or None


# -- a run folder sent back to the head ------------------------------------------------------------
def pack_folder(folder: Path) -> bytes:
    """The run folder ``folder`` as an uncompressed tar archive in memory (its parquet files are
    compressed already); names are relative to the folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def land_folder(base: Path, run_id: str, data: bytes) -> Path:
    """Put a member's run folder sent back as :func:`pack_folder` bytes at ``base/run_id``,
    appearing whole (unpacked hidden, then renamed). SchedlabError when the archive holds a path
    outside the folder or ``base/run_id`` exists already."""
    target = base / run_id
    if os.path.lexists(target):
        raise SchedlabError(f"{target} exists already; the member's run sent back was not put there")
    hidden = base / ARRIVING.format(run_id=run_id)
    shutil.rmtree(hidden, ignore_errors=True)
    hidden.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
            archive.extractall(hidden, filter="data")  # refuses absolute paths, .., links out
        os.rename(hidden, target)
    except BaseException:
        shutil.rmtree(hidden, ignore_errors=True)
        raise
    return target
