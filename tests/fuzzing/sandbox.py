"""Run one fuzz case at a time in a throw-away child process, forked from a warm server.

Some inputs hang (a spin on NaN arrival times, a numba kernel told to iterate 10**18 times),
exhaust memory or recurse without bound. In the pytest process they would stop the whole suite,
so each case runs in a child forked from a long-lived server process that has already imported
``runners`` (a fork costs milliseconds, no re-import). The child calls ``runners.app.cli.main(argv)``
(or one named function) directly, exactly as the tests would in-process, with:

- ``sys.stdout`` / ``sys.stderr`` captured (like capsys), the file descriptors sent to a file;
- a wall-clock limit (the server kills the child's process group past ``timeout_s``);
- an address-space limit (``mem_mb`` above what the server already maps), so a MemoryError
  is raised instead of the machine swapping;
- its own current directory (``cwd``).

The answer says how the case ended: ``rc`` (main's return value), ``out``, ``err``, ``raised``
(the exception type, message and the traceback's last line when main raised), ``timed_out``,
``signal`` (the child died of one) and ``elapsed_s``.

One server serves a whole pytest session (:func:`get_sandbox`); it is stopped at exit.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PRELOAD = (
    "runners.app.cli",
    "runners.run.benchmark",
    "runners.run.config",
    "runners.store.result_store",
    "runners.views.compare",
    "runners.views.charts",
    "runners.registry",
    "runners.engines.profile",
    "runners.workload.builder",
)


@dataclass
class Outcome:
    """How one case ended in its child process."""

    rc: Any = None
    out: str = ""
    err: str = ""
    value: Any = None  # what a called function returned (JSON-safe form)
    raised: dict[str, str] | None = None  # {"type", "message", "where", "last_line"}
    timed_out: bool = False
    signal: int | None = None
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (self.raised or self.timed_out or self.signal)

    def problem(self) -> str | None:
        """A one-line description of an abnormal end, or None."""
        if self.timed_out:
            return f"hang: no answer after {self.elapsed_s:.1f} s (killed)"
        if self.signal:
            return f"crash: child died of signal {self.signal}"
        if self.raised:
            return f"raised {self.raised['type']}: {self.raised['message'][:160]} [at {self.raised['where']}]"
        return None


# -- the child side ------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if hasattr(value, "model_dump"):  # a typed record (runners.store.models): its fields as set
            return _jsonable(value.model_dump(mode="json", exclude_unset=True))
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        return repr(value)[:2000]


def _where(exc: BaseException) -> tuple[str, str]:
    """(file:line of the innermost frame, the traceback's last line)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = "?"
    if frames:
        last = frames[-1]
        path = Path(last.filename)
        try:
            path = path.relative_to(ROOT)
        except ValueError:
            path = Path(*path.parts[-2:]) if len(path.parts) >= 2 else path
        where = f"{path}:{last.lineno} in {last.name}"
    last_line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return where, last_line[:300]


def _run_in_child(request: dict[str, Any], result_path: str) -> None:
    """Body of the forked child: run the case, write the answer as JSON, never return."""
    answer: dict[str, Any] = {}
    try:
        os.setpgid(0, 0)
        limit = request.get("mem_limit_bytes")
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        os.chdir(request.get("cwd") or str(ROOT))
        sink = os.open(result_path + ".fds", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        out, err = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = out, err
        for name, value in (request.get("env") or {}).items():
            os.environ[name] = value
        for dotted, value in (request.get("patch_paths") or {}).items():  # e.g. the dashboard's results folder
            module_name, _, attribute = dotted.rpartition(".")
            setattr(importlib.import_module(module_name), attribute, Path(value))
        started = time.perf_counter()
        try:
            if request["kind"] == "cli":
                from runners.app.cli import main

                answer["rc"] = _jsonable(main(list(request["argv"])))
            else:
                module_name, _, function_name = request["function"].partition(":")
                function = getattr(importlib.import_module(module_name), function_name)
                answer["value"] = _jsonable(function(*request.get("args", []), **request.get("kwargs", {})))
        except SystemExit as exc:  # argparse rejects a flag: that is main's own answer
            answer["rc"] = exc.code if isinstance(exc.code, int) else 2
            answer["system_exit"] = True
        except BaseException as exc:
            where, last_line = _where(exc)
            answer["raised"] = {
                "type": type(exc).__name__,
                "message": str(exc)[:1000],
                "where": where,
                "last_line": last_line,
                "traceback": traceback.format_exc()[-4000:],
            }
        answer["elapsed_s"] = time.perf_counter() - started
        answer["out"] = out.getvalue()[-20000:]
        answer["err"] = err.getvalue()[-20000:]
    except BaseException as exc:
        answer["raised"] = {"type": "HarnessError", "message": repr(exc), "where": "sandbox", "last_line": repr(exc)}
    try:
        with open(result_path, "w", encoding="utf-8") as stream:
            json.dump(answer, stream, default=repr)
    finally:
        os._exit(0)


def _serve() -> None:
    """The server loop: one JSON request per stdin line, one JSON answer per stdout line."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything the server itself prints goes to stderr
    sys.stdout = sys.stderr
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"sandbox: preloading {name} failed: {exc!r}", file=sys.stderr)
    _warm_up()
    vm_bytes = _vm_size_bytes()
    protocol.write(json.dumps({"ready": True, "vm_bytes": vm_bytes}) + "\n")
    workdir = tempfile.mkdtemp(prefix="schedlab-fuzz-sandbox-")
    for line in sys.stdin:
        request = json.loads(line)
        result_path = os.path.join(workdir, f"case-{os.getpid()}-{time.monotonic_ns()}.json")
        mem_mb = request.get("mem_mb", 3072)
        request["mem_limit_bytes"] = vm_bytes + mem_mb * 2**20 if mem_mb else None
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            _run_in_child(request, result_path)
        deadline = started + float(request.get("timeout_s", 10.0))
        kill_at = started + float(request["kill_after_s"]) if request.get("kill_after_s") else None
        status, timed_out, killed_on_purpose = None, False, False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            now = time.perf_counter()
            if kill_at is not None and now >= kill_at:
                _kill_group(pid)
                killed_on_purpose = True
                kill_at = None
            elif now >= deadline:
                _kill_group(pid)
                timed_out = True
            time.sleep(0.003)
        elapsed = time.perf_counter() - started
        answer: dict[str, Any] = {}
        try:
            with open(result_path, encoding="utf-8") as stream:
                answer = json.load(stream)
        except (OSError, ValueError):
            pass
        for path in (result_path, result_path + ".fds"):
            try:
                os.unlink(path)
            except OSError:
                pass
        answer["timed_out"] = timed_out and not answer
        answer["killed"] = killed_on_purpose
        if os.WIFSIGNALED(status) and not answer and not killed_on_purpose and not timed_out:
            answer["signal"] = os.WTERMSIG(status)
        answer.setdefault("elapsed_s", elapsed)
        answer["wall_s"] = elapsed
        protocol.write(json.dumps(answer, default=repr) + "\n")


def _warm_up() -> None:
    """Run every scheduler once on 3 requests so its numba kernels are compiled in the server:
    children inherit them instead of each compiling for seconds (or being killed mid-compile)."""
    from runners.app.cli import main
    from runners.registry import SCHEDULERS
    from tests.fuzzing.seeds import tiny_workload_args, write_dataset

    folder = Path(tempfile.mkdtemp(prefix="schedlab-fuzz-warm-"))
    dataset = write_dataset(folder)
    for name in SCHEDULERS:
        try:
            main(
                [
                    "run",
                    "--requests",
                    "3",
                    "--scheduler",
                    name,
                    "--out",
                    str(folder / "results"),
                    "--quiet",
                    "--run-id",
                    f"warm-{name}",
                    *tiny_workload_args(dataset),
                ]
            )
        except BaseException as exc:
            print(f"sandbox: warming up {name} failed: {exc!r}", file=sys.stderr)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _vm_size_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as stream:
        for line in stream:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


# -- the pytest side -----------------------------------------------------------------------------
class Sandbox:
    """The client of one sandbox server."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
        env.setdefault("HF_DATASETS_OFFLINE", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from tests.fuzzing.sandbox import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=str(ROOT),
            env=env,
            text=True,
            bufsize=1,
        )
        hello = self._read_line(120.0)
        if not hello or not json.loads(hello).get("ready"):
            raise RuntimeError("the fuzz sandbox server did not start")

    def _read_line(self, timeout_s: float) -> str | None:
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            return None
        line = self.process.stdout.readline()
        return line or None

    def _ask(self, request: dict[str, Any]) -> Outcome:
        if self.process is None or self.process.poll() is not None:
            self._start()
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self._read_line(float(request.get("timeout_s", 10.0)) + 60.0)
        if line is None:
            self.close()
            return Outcome(
                raised={
                    "type": "SandboxLost",
                    "message": "the sandbox server stopped answering",
                    "where": "sandbox",
                    "last_line": "SandboxLost",
                }
            )
        data = json.loads(line)
        return Outcome(
            rc=data.get("rc"),
            out=data.get("out", ""),
            err=data.get("err", ""),
            value=data.get("value"),
            raised=data.get("raised"),
            timed_out=bool(data.get("timed_out")),
            signal=data.get("signal"),
            elapsed_s=float(data.get("wall_s", 0.0)),
            extra={k: data[k] for k in ("system_exit", "killed") if k in data},
        )

    def cli(
        self,
        argv: list[str],
        cwd: str | Path | None = None,
        timeout_s: float = 10.0,
        mem_mb: int = 3072,
        kill_after_s: float | None = None,
        env: dict[str, str] | None = None,
        patch_paths: dict[str, str] | None = None,
    ) -> Outcome:
        """``runners.app.cli.main(argv)`` in a fresh child."""
        return self._ask(
            {
                "kind": "cli",
                "argv": [str(a) for a in argv],
                "cwd": str(cwd) if cwd else None,
                "timeout_s": timeout_s,
                "mem_mb": mem_mb,
                "kill_after_s": kill_after_s,
                "env": env or {},
                "patch_paths": patch_paths or {},
            }
        )

    def call(
        self,
        function: str,
        *args: Any,
        cwd: str | Path | None = None,
        timeout_s: float = 10.0,
        mem_mb: int = 3072,
        patch_paths: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Outcome:
        """``module:function(*args, **kwargs)`` in a fresh child; arguments and result as JSON."""
        return self._ask(
            {
                "kind": "call",
                "function": function,
                "args": list(args),
                "kwargs": kwargs,
                "cwd": str(cwd) if cwd else None,
                "timeout_s": timeout_s,
                "mem_mb": mem_mb,
                "patch_paths": patch_paths or {},
            }
        )

    def close(self) -> None:
        if self.process is not None:
            try:
                if self.process.stdin:
                    self.process.stdin.close()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
            self.process = None


_SANDBOX: Sandbox | None = None


def get_sandbox() -> Sandbox:
    """The session's sandbox server, started on first use."""
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox()
        atexit.register(_SANDBOX.close)
    return _SANDBOX
