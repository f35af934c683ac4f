"""Checks before a launch: can this machine run what the config asks, whatever the run's own settings?

A launch that cannot succeed is refused before anything starts, each reason under the field to
change (the Launch form shows it under that field; the CLI prints it): for an engine schedlab
launches, its program or Python module is installed in the chosen Python (the engine adapter's
own check, :meth:`runners.engines.adapters.base.EngineAdapter.launch_problem`, the one the Home
page's "not installed here" reads), its model is a folder that exists or an id the hub can
serve (with ``HF_HUB_OFFLINE=1`` only one already in the hub cache), and the ports it names are
free; for attached servers, every URL is well-formed. The simulator needs none of this. Nothing
here imports streamlit or starts a server; a Python other than this one is asked in a
subprocess (a few hundred ms).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from runners.engines.adapters import ADAPTERS
from runners.engines.real_config import AttachConfig, LaunchOptions
from runners.errors import EnvironmentProblem
from runners.run.config import RunConfig

#: What a hub model id looks like: ``name`` or ``org/name`` (letters, digits, ``-_.``), not a path.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
#: Values of ``HF_HUB_OFFLINE`` that switch the hub off (as huggingface_hub reads them).
OFFLINE_VALUES = ("1", "on", "yes", "true")


def refusals(config: RunConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Why ``config`` cannot run on this machine, by dotted field (``engine.python``,
    ``engine.model``, ``engine.ports``, ``engine.urls``, ``engine.kind``); {} when nothing
    stands in the way (always for the simulator). ``environ``: the environment the servers
    start in (default this process's; a launch config's ``env`` is added to it)."""
    engine = config.engine
    environ = os.environ if environ is None else environ
    if isinstance(engine, AttachConfig):
        problem = urls_problem(engine.urls)
        return {"engine.urls": problem} if problem else {}
    adapter = ADAPTERS.get(engine.kind)
    if adapter is None or adapter.config is None or not isinstance(engine, LaunchOptions):
        return {}
    found: dict[str, str] = {}
    launch = adapter.launch_problem(engine)
    if launch is not None:
        found[launch[0]] = launch[1]
    # a launch by a command of the config's own: that command, not schedlab, says what its model is
    model = (
        None
        if getattr(engine, "command", None)
        else model_problem(str(getattr(engine, "model", "")), {**environ, **engine.env})
    )
    if model is not None:
        found["engine.model"] = model
    ports = ports_problem(engine.host, list(engine.ports or []))
    if ports is not None:
        found["engine.ports"] = ports
    return found


def check(config: RunConfig, environ: Mapping[str, str] | None = None) -> None:
    """:class:`runners.errors.EnvironmentProblem` naming the first field of :func:`refusals`
    (for the CLI: one line before anything starts); nothing when the launch can go ahead."""
    for field, message in refusals(config, environ).items():
        raise EnvironmentProblem(field, message)


def hub_cache(environ: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache folder: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(environ["XDG_CACHE_HOME"]).expanduser() if environ.get("XDG_CACHE_HOME") else Path("~/.cache")
    return cache.expanduser() / "huggingface" / "hub"


def in_hub_cache(model_id: str, environ: Mapping[str, str]) -> bool:
    """Whether hub model ``model_id`` has a downloaded snapshot in :func:`hub_cache`."""
    snapshots = hub_cache(environ) / f"models--{model_id.replace('/', '--')}" / "snapshots"
    try:
        return snapshots.is_dir() and any(snapshots.iterdir())
    except OSError:
        return False


def model_problem(model: str, environ: Mapping[str, str]) -> str | None:
    """Why the engine cannot load ``model``: not a folder (or file) here and no hub id (a path:
    ``/models/x``, ``./x``, ``~/x``, ``a/b/c``), or a hub id not in the hub cache while
    ``HF_HUB_OFFLINE`` forbids downloading it; None when it can."""
    path = Path(model).expanduser()
    if path.exists():
        return None
    if not HUB_ID.fullmatch(model):
        return f"no folder {model!r} on this machine; expected the folder of a model (or a hub id such as org/name)"
    if str(environ.get("HF_HUB_OFFLINE", "")).strip().lower() in OFFLINE_VALUES and not in_hub_cache(model, environ):
        return (
            f"no folder {model!r} on this machine, and as a hub id it is not in the hub cache "
            f"({hub_cache(environ)}) while HF_HUB_OFFLINE=1 forbids downloading it; expected a model folder"
        )
    return None


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (a bind, released at once)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError:
        return False
    return True


def ports_problem(host: str, ports: list[int]) -> str | None:
    """Which of the ports a launch names are taken on ``host``; None when all are free."""
    taken = [port for port in ports if not port_free(host, port)]
    if not taken:
        return None
    listed = ", ".join(str(port) for port in taken)
    return f"port {listed} on {host} is in use; expected free ports (or none given: schedlab then picks free ones)"


def urls_problem(urls: list[str]) -> str | None:
    """The first server URL that is not ``http(s)://host[:port][/path]``; None when all are."""
    for url in urls:
        parts = urlsplit(url)
        try:
            port = parts.port  # ValueError for a port that is no number or out of range
        except ValueError:
            return f"{url!r} has no valid port; expected a URL such as http://gpu-box:8000"
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
            return f"{url!r} is not a server URL; expected http(s)://host:port, e.g. http://gpu-box:8000"
        if port == 0:
            return f"{url!r} has port 0; expected the port the server listens on"
    return None
