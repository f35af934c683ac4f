"""The base of schedlab's in-engine schedulers: a subclass of vLLM's own scheduler that checks the
vLLM version, sets the admission limit before each step and records its decisions.

Which vLLM class: ``vllm.v1.core.sched.scheduler.Scheduler``, with an ``AsyncScheduler`` twin.
vLLM 0.32 builds ``scheduler_config.get_scheduler_cls()(vllm_config=..., ...)`` in the engine core;
with no ``--scheduler-cls`` it picks ``AsyncScheduler`` when ``scheduler_config.async_scheduling``
is on and ``Scheduler`` otherwise, but a custom class is used as given, whatever that flag says.
The flag also switches the model runner to overlapped steps, which only ``AsyncScheduler``'s
output placeholders keep consistent. So each schedlab class is a ``Scheduler`` subclass whose
``__new__`` hands back its ``async_variant`` (the same class mixed with ``AsyncScheduler``) when
async scheduling is on: one ``--scheduler-cls`` name, the right parent either way. The CPU
platform of vLLM 0.32 forces ``async_scheduling = False`` (platforms/cpu.py), so on the CPU build
it is always the plain ``Scheduler``; the async variant is untested here (no GPU vLLM).

The knob: vLLM 0.32 admits WAITING requests into RUNNING only while
``len(running) < self.max_num_active_reqs`` (the ``--max-num-active-seqs`` limit, default
``max_num_seqs``); ``self.max_num_running_reqs`` is the model runner's slot count and is asserted
``>= len(running)`` after each step, so lowering it could crash the engine. A schedlab class sets
``max_num_active_reqs`` (between 1 and ``max_num_running_reqs``); vLLM never preempts a running
request to meet it, it only stops admitting.

Decisions: one JSON object per recorded step, appended to ``$SCHEDLAB_ENGINE_DECISIONS`` (a
JSON-lines file; unset: none written) and logged as ``SCHEDLAB_DECISION {json}`` at most once a
second. A step is recorded when the limit changed, or at most once per
``$SCHEDLAB_ENGINE_DECISION_INTERVAL_S`` (default 0.25 s) otherwise; idle steps (nothing running
or waiting) are not recorded. Fields: ``step`` (schedule() calls so far), ``t`` (Unix time,
seconds), ``limit`` (running limit applied), ``b_max``, ``running`` and ``waiting`` (after the
step), ``admitted`` (moved from waiting to running by the step), ``admitted_total`` (by every step
so far, recorded or not: the difference of two records counts every admission between them), ``held_back`` (waiting requests
the engine's own slots would have taken but the limit kept out: min(waiting, b_max - running)
when running reached a limit below b_max, else 0), ``preempted``, ``free_blocks`` and
``total_blocks`` (the KV block pool, before the step), ``block_size`` (tokens), plus whatever the
policy adds (:meth:`SchedlabScheduler.decision_fields`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import vllm
from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler

from runners.engines.engine_decisions import DECISION_LOG_PREFIX, DECISIONS_ENV
from runners.schedulers.vllm import (
    DECISION_INTERVAL_ENV,
    FAIL_AT_STEP_ENV,
    VERSION_OVERRIDE_ENV,
    version_error,
)

logger = init_logger("vllm.schedlab")

#: Seconds between decision lines in the server log.
LOG_INTERVAL_S = 1.0


def check_vllm_version() -> None:
    """RuntimeError with :func:`version_error`'s message unless the running vLLM is supported
    (``$SCHEDLAB_ENGINE_VLLM_VERSION``, a test hook, stands in for the installed version)."""
    version = os.environ.get(VERSION_OVERRIDE_ENV) or getattr(vllm, "__version__", None)
    message = version_error(version)
    if message is not None:
        logger.error("%s", message)
        raise RuntimeError(message)


class SchedlabScheduler(Scheduler):
    """vLLM's Scheduler with a running limit chosen by :meth:`running_limit` before each step.

    Subclasses override :meth:`running_limit` (and may add :meth:`decision_fields`) and name an
    ``async_variant`` (``class XAsync(X, AsyncScheduler)``) for engines with async scheduling on.
    """

    async_variant: type | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "SchedlabScheduler":
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        wants_async = bool(getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False))
        if wants_async and not issubclass(cls, AsyncScheduler):
            if cls.async_variant is None:
                raise RuntimeError(f"{cls.__name__} has no async variant; start vLLM with --no-async-scheduling")
            cls = cls.async_variant
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_vllm_version()
        super().__init__(*args, **kwargs)
        self.step_index = 0
        self.b_max = self.max_num_running_reqs
        self._decisions_path = os.environ.get(DECISIONS_ENV) or None
        self._interval_s = float(os.environ.get(DECISION_INTERVAL_ENV) or 0.25)
        self._last_recorded = float("-inf")
        self._last_logged = float("-inf")
        self._last_limit: int | None = None
        self._fail_at_step = int(os.environ.get(FAIL_AT_STEP_ENV) or 0)  # test hook; 0: never
        self.admitted_total = 0
        if self._decisions_path:
            os.makedirs(os.path.dirname(os.path.abspath(self._decisions_path)), exist_ok=True)
        logger.info(
            "schedlab in-engine scheduler %s (vLLM %s, %s), block size %d tokens, %d KV blocks, "
            "max_num_seqs %d, decisions to %s",
            type(self).__name__,
            vllm.__version__,
            "async" if isinstance(self, AsyncScheduler) else "sync",
            self.block_size,
            self.total_blocks(),
            self.max_num_running_reqs,
            self._decisions_path or "the log only",
        )

    # --- what a policy overrides -------------------------------------------------------------
    def running_limit(self) -> int | None:
        """The running limit for the coming step (requests), or None to keep the current one."""
        return None

    def decision_fields(self) -> dict[str, Any]:
        """Extra fields for the decision record of the step just scheduled."""
        return {}

    # --- engine state, read-only ---------------------------------------------------------------
    def free_blocks(self) -> int:
        """Free KV blocks in the block pool (cached-but-unreferenced blocks count as free)."""
        return self.kv_cache_manager.block_pool.get_num_free_blocks()

    def total_blocks(self) -> int:
        """Usable KV blocks (the pool less its null block)."""
        return self.kv_cache_manager.block_pool.num_gpu_blocks - 1

    def running_block_ids(self) -> list[list[int]]:
        """Each running request's KV block ids (all KV cache groups together; the null block,
        which stands for skipped blocks and holds nothing, left out)."""
        null = self.kv_cache_manager.block_pool.null_block.block_id
        return [
            [
                block
                for group in self.kv_cache_manager.get_block_ids(request.request_id)
                for block in group
                if block != null
            ]
            for request in self.running
        ]

    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.kv_holding_waiting)

    # --- the step ------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self.step_index += 1
        if self.step_index == self._fail_at_step:
            raise RuntimeError(
                f"schedlab in-engine scheduler {type(self).__name__} failed at step {self.step_index} "
                f"({FAIL_AT_STEP_ENV} test hook)"
            )
        free_before = self.free_blocks()
        limit = self.running_limit()
        if limit is not None:
            self.max_num_active_reqs = max(1, min(int(limit), self.max_num_running_reqs))
        running_before = {request.request_id for request in self.running}
        output = super().schedule(*args, **kwargs)
        running, waiting = len(self.running), self.num_waiting()
        if running or waiting:
            applied = self.max_num_active_reqs
            admitted = sum(1 for request in self.running if request.request_id not in running_before)
            self.admitted_total += admitted
            held = min(waiting, self.b_max - running) if running >= applied and applied < self.b_max else 0
            self._record(
                {
                    "step": self.step_index,
                    "t": time.time(),
                    "limit": applied,
                    "b_max": self.b_max,
                    "running": running,
                    "waiting": waiting,
                    "admitted": admitted,
                    "admitted_total": self.admitted_total,
                    "held_back": max(0, held),
                    "preempted": len(output.preempted_req_ids or ()),
                    "free_blocks": free_before,
                    "total_blocks": self.total_blocks(),
                    "block_size": self.block_size,
                    **self.decision_fields(),
                }
            )
        return output

    def _record(self, decision: dict[str, Any]) -> None:
        now = time.monotonic()
        changed = decision["limit"] != self._last_limit
        if not changed and now - self._last_recorded < self._interval_s:
            return
        self._last_limit = decision["limit"]
        self._last_recorded = now
        line = json.dumps(decision, separators=(",", ":"))
        if self._decisions_path:
            try:
                with open(self._decisions_path, "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
            except OSError as exc:  # a full disk must not stop the engine: say so once, keep serving
                logger.warning("schedlab: cannot write decisions to %s (%s); logging only", self._decisions_path, exc)
                self._decisions_path = None
        if now - self._last_logged >= LOG_INTERVAL_S:
            self._last_logged = now
            logger.info("%s%s", DECISION_LOG_PREFIX, line)
