"""Schedulers from outside the project, found without editing it (issue 30):

- an installed package's entry points in the group :data:`ENTRY_POINT_GROUP`
  (``schedlab.schedulers``): the entry point's name is the scheduler's name, its value
  ``"module:Class"`` (imported on first use, like the built-in ones);
- Python files or importable modules named in :data:`PATH_ENV` (``SCHEDLAB_SCHEDULER_PATH``,
  separated by ``os.pathsep``; the CLI's ``--scheduler-path`` adds to it, and spawned study
  workers inherit it): every :class:`~runners.schedulers.base.SchedulerPolicy` subclass the
  file or module defines with a ``name`` is registered under that name.

A source that cannot be loaded (a missing file, a syntax error, an exception at import), a
class whose name is taken, or an entry point whose name clashes is one line in the returned
problems, naming the file or entry point; the other schedulers are registered as usual.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from runners.errors import SchedlabError
from runners.registries import Registry
from runners.schedulers.base import SchedulerPolicy

#: The entry point group an installed package registers its schedulers in.
ENTRY_POINT_GROUP = "schedlab.schedulers"
#: The environment variable naming scheduler files or modules (``os.pathsep``-separated).
PATH_ENV = "SCHEDLAB_SCHEDULER_PATH"


def _file_module(path: Path) -> ModuleType:
    """The module of the Python file ``path``, imported once per process under a name made of
    its stem and its resolved path (so two files of one stem do not collide, and a study worker
    that loads the same file gets the same module name)."""
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"schedlab_user_{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise SchedlabError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_source(source: str) -> list[type[SchedulerPolicy[Any]]]:
    """The scheduler classes ``source`` defines (a ``.py`` file, or a module name), in
    definition order: subclasses of SchedulerPolicy with a ``name``, defined in that module (not
    imported into it). SchedlabError, one line naming the source, when it cannot be loaded."""
    try:
        if source.endswith(".py") or os.sep in source or (os.altsep and os.altsep in source):
            path = Path(source)
            if not path.is_file():
                raise SchedlabError(f"{source}: no such file; expected a Python file of scheduler classes")
            module = _file_module(path)
        else:
            module = importlib.import_module(source)
    except SchedlabError:
        raise
    except SyntaxError as exc:
        raise SchedlabError(f"{source}: line {exc.lineno}: {exc.msg}") from None
    except BaseException as exc:  # a user's module may raise anything at import, even SystemExit
        raise SchedlabError(f"{source}: importing it raised {type(exc).__name__}: {exc}") from None
    found = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, SchedulerPolicy)
        and value.__module__ == module.__name__
        and bool(value.name)
    ]
    if not found:
        raise SchedlabError(f"{source}: defines no SchedulerPolicy subclass with a name")
    return found


def discover(
    registry: Registry[type[SchedulerPolicy[Any]]],
    check: Callable[[str, Any], None],
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Register the entry points' and :data:`PATH_ENV`'s schedulers in ``registry`` (entry
    points deferred, checked by ``check`` on load); the problems, one line each."""
    environ = os.environ if environ is None else environ
    problems: list[str] = []
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name!r} ({point.value})"
        try:
            registry.register_deferred(point.name, point.value, check)
        except SchedlabError as exc:
            problems.append(f"{where}: {exc}")
    for source in (part.strip() for part in environ.get(PATH_ENV, "").split(os.pathsep)):
        if not source:
            continue
        try:
            classes = load_source(source)
        except SchedlabError as exc:
            problems.append(str(exc))
            continue
        for cls in classes:
            if cls.name in registry:
                if registry.get(cls.name) is not cls:  # the same class named twice is no clash
                    problems.append(f"{source}: scheduler {cls.name!r} ({cls.__qualname__}) is taken; not added")
                continue
            registry.register(cls.name, cls)
    return problems


def source_files(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Python files :data:`PATH_ENV` names, as {path: text} (read now), for workers on other
    machines that cannot read this one's files (the Ray executor ships them with each task);
    modules and files that cannot be read are left out (modules must be installed on the nodes)."""
    environ = os.environ if environ is None else environ
    shipped = {}
    for source in (part.strip() for part in environ.get(PATH_ENV, "").split(os.pathsep)):
        if source.endswith(".py"):
            try:
                shipped[source] = Path(source).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
    return shipped


def use_shipped_sources(shipped: Mapping[str, str], registry: Registry[type[SchedulerPolicy[Any]]]) -> list[str]:
    """In a worker process: write each shipped file (:func:`source_files`) into a folder of this
    machine named by its content, under the same file name (so a module beside it is found as at
    home), and register its schedulers not yet in ``registry``. Returns the problems, one line
    each (a file whose classes clash is not used)."""
    import tempfile

    problems = []
    for path, text in shipped.items():
        digest = hashlib.sha1(text.encode()).hexdigest()[:12]
        copy = Path(tempfile.gettempdir()) / f"schedlab-shipped-{digest}" / Path(path).name
        try:
            if not copy.is_file() or copy.read_text(encoding="utf-8") != text:
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_text(text, encoding="utf-8")
            classes = load_source(str(copy))
        except (OSError, SchedlabError) as exc:
            problems.append(f"{path} (shipped): {exc}")
            continue
        for cls in classes:
            if cls.name not in registry:
                registry.register(cls.name, cls)
    return problems
