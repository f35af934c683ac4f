"""The client side of schedlab's in-engine schedulers (``engine-<name>``): the policy runs inside
vLLM as its scheduler class (runners/schedulers/vllm/), so the client sends every request
on arrival, as FCFS does, and the engine decides what runs. Its parameters are the in-engine
class's; the run writes them into its folder for the server (see ``launch_settings``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field
from typing_extensions import TypeVar

from runners.input_model import InputModel
from runners.schedulers.base import Completion, Dispatch, InstanceInfo, P, PolicyParams
from runners.schedulers.fcfs import DispatchOnArrival
from runners.schedulers.papers import cite
from runners.schedulers.predictors import (
    OutputLengthPredictor,
    OutputMode,
    OutputPriorParams,
)
from runners.schedulers.slo_aware import SLOPlanParams
from runners.schedulers.vllm import (
    E2E_SLO_ARG,
    PREDICTED_OUTPUT_ARG,
    TPOT_SLO_ARG,
    TTFT_SLO_ARG,
    EngineDynamicMemoryParams,
    EngineDynamicSLAParams,
    EngineMCSFParams,
    EngineSLOAwareParams,
)
from runners.workload.requests import Request


class InEnginePolicy(DispatchOnArrival[P]):
    """Dispatch on arrival (FCFS, no cap); the engine's scheduler class decides. One registration
    holds the whole in-engine scheduler: subclass this, set the policy's ``name`` and ``Params``
    and the three attributes below, and register it (the built-in list, a user's file, or an
    entry point)."""

    in_engine: ClassVar[bool] = True
    #: the client-side policy with the same decision logic (a scheduler name; "" when none)
    twin: ClassVar[str] = ""
    #: the vLLM scheduler class, as ``--scheduler-cls`` takes it: "package.module.Class". A user's
    #: class lives in a module beside the policy's file or in an installed package; the server's
    #: PYTHONPATH gets its folder (runners.schedulers.vllm.engine_pythonpath)
    engine_class: ClassVar[str] = ""
    #: the parameters model the engine class reads from ``SCHEDLAB_ENGINE_PARAMS``: only its fields
    #: are written for the server (None: every parameter of the policy)
    engine_params: ClassVar[type[InputModel] | None] = None

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.engine_args: dict[str, dict[str, int | float]] = {}

    def request_args(self, request: Request) -> dict[str, int | float]:
        """The values sent with ``request`` for the engine class (vLLM's ``vllm_xargs``; flat
        numbers, names in runners.schedulers.vllm), made once at its arrival. None by default;
        :func:`slo_args` gives its task's SLOs."""
        return {}

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        args = self.request_args(request)
        if args:
            self.engine_args[request.request_id] = args

    def _take(
        self, request_id: str, instance: int, max_tokens: int | None = None, priority: int | None = None
    ) -> Dispatch:
        """The base class's dispatch, with the request's engine arguments (decide stays the
        dispatch-on-arrival one, so the simulator keeps its fast path for it)."""
        dispatch = super()._take(request_id, instance, max_tokens, priority)
        dispatch.engine_args = self.engine_args.get(request_id)
        return dispatch


def slo_args(request: Request) -> dict[str, int | float]:
    """``request``'s task SLOs as engine arguments (``TTFT_SLO_ARG``, ``TPOT_SLO_ARG``,
    ``E2E_SLO_ARG``, seconds; those its task sets), read in the engine by
    runners.schedulers.vllm.sent_slos."""
    return {
        name: float(limit)
        for name, limit in (
            (TTFT_SLO_ARG, request.slo.ttft_s),
            (TPOT_SLO_ARG, request.slo.tpot_s),
            (E2E_SLO_ARG, request.slo.e2e_s),
        )
        if limit is not None
    }


class InEnginePolicyParams(PolicyParams):
    """What every in-engine policy's parameters share as a policy's."""

    #: FCFS dispatch without a cap (the engine holds requests back, not the client)
    max_in_flight: ClassVar[None] = None


class EngineDynamicMemoryPolicyParams(EngineDynamicMemoryParams, InEnginePolicyParams):
    """engine-dynamic-mem's parameters, as a policy's (the in-engine class reads the same model)."""


class EngineDynamicMemoryPolicy(InEnginePolicy[EngineDynamicMemoryPolicyParams]):
    name = "engine-dynamic-mem"
    summary = (
        "The memory-aware dynamic batching (Alg. 1) inside vLLM: each step the engine's running limit comes from its free KV blocks "
        "(block-exact); the client sends on arrival. Needs a vLLM launched by schedlab"
    )
    paper = cite("000", "Alg. 1, as a vLLM scheduler class")
    twin = "dynamic-mem"
    engine_class = "runners.schedulers.vllm.dynamic_mem.DynamicMemoryScheduler"
    engine_params = EngineDynamicMemoryParams
    Params = EngineDynamicMemoryPolicyParams


class EngineDynamicSLAPolicyParams(EngineDynamicSLAParams, InEnginePolicyParams):
    """engine-dynamic-sla's parameters, as a policy's (the in-engine class reads the same model)."""


class EngineDynamicSLAPolicy(InEnginePolicy[EngineDynamicSLAPolicyParams]):
    name = "engine-dynamic-sla"
    summary = (
        "The SLA-constrained dynamic batching (Alg. 2) inside vLLM: each step the engine's running limit follows a window moved by its own "
        "measured step time against D_SLA, capped by Alg. 1's block-exact limit; the client sends on "
        "arrival. Needs a vLLM launched by schedlab"
    )
    paper = cite("000", "Alg. 2, as a vLLM scheduler class")
    twin = "dynamic-sla"
    engine_class = "runners.schedulers.vllm.dynamic_mem.DynamicSLAScheduler"
    engine_params = EngineDynamicSLAParams
    Params = EngineDynamicSLAPolicyParams


class PredictorPolicyParams(OutputPriorParams, InEnginePolicyParams):
    """An in-engine policy's parameters that include the output-length predictor's (the client predicts)."""


#: The parameters type of a policy that predicts output lengths on the client.
PP = TypeVar("PP", bound=PredictorPolicyParams, default=PredictorPolicyParams)


class EngineMCSFPolicyParams(EngineMCSFParams, PredictorPolicyParams):
    """engine-mcsf's parameters: the in-engine class's (memory_fraction) and the output-length
    predictor the client runs to send each request's prediction (as the client-side mcsf's)."""

    output_predictor: OutputMode = Field(
        title="output-length predictor",
        default="gaussian",
        description="the prediction sent to the engine with each request - gaussian: a draw from its task's "
        "Gaussian (output_prior says where it starts); oracle: its exact target length, MC-SF's own "
        "assumption (an oracle, labelled as one); noisy-oracle: the target with a known error",
    )


class PredictingInEnginePolicy(InEnginePolicy[PP]):
    """Sends on arrival, each request with its engine arguments (:meth:`request_args`): at least
    its predicted output length (``PREDICTED_OUTPUT_ARG``, tokens) from the twin's own
    OutputLengthPredictor (the same parameters, drawn once at arrival, finished requests pooled in
    for later arrivals), so the engine and the client twin plan with the same predictions."""

    #: drop a finished request's prediction from the predictor (as the twin does)
    forget_finished: ClassVar[bool] = False

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.outputs = OutputLengthPredictor.from_params(self.params, self.workload, self.calibration)

    def request_args(self, request: Request) -> dict[str, int | float]:
        """The engine arguments of ``request``, made once at its arrival."""
        return {PREDICTED_OUTPUT_ARG: self.outputs.predict(request)}

    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        if completion.done:
            self.outputs.observe(self.requests[completion.request_id].task, completion.tokens_total)
            if self.forget_finished:
                self.outputs.forget(completion.request_id)


class EngineMCSFPolicy(PredictingInEnginePolicy[EngineMCSFPolicyParams]):
    """Sends on arrival, each request with its predicted output length (tokens) as the engine
    argument ``PREDICTED_OUTPUT_ARG``: the prediction the client-side mcsf would use. The engine's
    MCSFScheduler orders and admits."""

    name = "engine-mcsf"
    summary = (
        "MC-SF (KV-cache-constrained online scheduling) inside vLLM: the engine orders its queue shortest predicted output first and admits "
        "while the future KV peak fits its blocks; the client sends on arrival with each request's "
        "prediction. Needs a vLLM launched by schedlab"
    )
    paper = cite("003", "MC-SF, as a vLLM scheduler class")
    twin = "mcsf"
    engine_class = "runners.schedulers.vllm.mcsf.MCSFScheduler"
    engine_params = EngineMCSFParams
    Params = EngineMCSFPolicyParams


class EngineSLOAwarePolicyParams(SLOPlanParams, PredictorPolicyParams):
    """engine-slo-sa's parameters: the plan's settings (slo-sa's own fields, read by the engine's
    class) and the output-length predictor the client runs to send each request's prediction
    (slo-sa's). The latency model the plan needs is the run's engine.profile: the launcher adds
    it to what the engine reads."""


class EngineSLOAwarePolicy(PredictingInEnginePolicy[EngineSLOAwarePolicyParams]):
    """Sends on arrival, each request with engine arguments for the engine's SLOAwareScheduler:
    its predicted output length (``PREDICTED_OUTPUT_ARG``, tokens; slo-sa's predictor) and its
    task's SLOs (``TTFT_SLO_ARG``, ``TPOT_SLO_ARG``, ``E2E_SLO_ARG``, seconds; those the task
    sets). The engine plans and orders. Unlike slo-sa, which predicts a waiting request anew as
    its task's fit moves, the engine keeps the prediction sent with the request."""

    name = "engine-slo-sa"
    summary = (
        "The SLO-aware simulated-annealing plan inside vLLM: the engine reorders its waiting queue in the "
        "latest plan's order whenever it changes, at most max_batch running; the client sends on arrival "
        "with each request's prediction and SLOs. Needs a vLLM launched by schedlab and engine.profile"
    )
    paper = cite("004", "Alg. 1-2, as a vLLM scheduler class")
    twin = "slo-sa"
    engine_class = "runners.schedulers.vllm.slo_sa.SLOAwareScheduler"
    engine_params = EngineSLOAwareParams
    Params = EngineSLOAwarePolicyParams
    forget_finished = True  # as slo-sa

    def request_args(self, request: Request) -> dict[str, int | float]:
        return {**super().request_args(request), **slo_args(request)}
