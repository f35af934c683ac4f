"""The policy interface every scheduler implements, for every driver.

A policy is told what happened (arrivals, first tokens, completions - including "slice
finished, request not done" - failures and telemetry samples) and answers what to dispatch now
and when to be asked again. It does no I/O, never sleeps and has no clock: time reaches it only
as the ``now`` argument (seconds since the run started). The virtual-time driver (simulator)
and the wall-clock driver (real engines) call the same methods in the same order, so a policy
cannot tell which one drives it.

Latency is measured from a request's arrival, so a request a policy holds back is waiting, and
that wait counts in its TTFT and E2E.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, cast, get_args, get_origin

from typing_extensions import TypeVar

from runners.engines.latency_model import LatencyModel
from runners.input_model import InputModel
from runners.workload.requests import Request


class PolicyError(RuntimeError):
    """A policy asked for something impossible (unknown request, double dispatch, bad instance)."""


class PolicyStalled(RuntimeError):
    """A policy found it cannot make progress (a livelock: the same requests admitted, overflowed
    and cleared again and again; or every request refused). Raised from :meth:`SchedulerPolicy.decide`;
    the run ends at once as failed, its error starting with ``stalled:`` and this message, and
    every measured row is kept."""


class PolicyParams(InputModel):
    """Base for a policy's parameters (pydantic: defaults, bounds and help text for UI and CLI).
    As every config model: finite floats, no booleans for numbers, integers within each bound."""


@dataclass(frozen=True)
class InstanceInfo:
    """What a policy knows about an engine instance at start (its beliefs, issue 48). Capacity,
    block size and batched tokens in tokens; ``max_num_seqs`` in requests running at once;
    ``sources``: where each limit came from (runners.engines.beliefs). The drivers fill every
    limit they can; a policy turns a missing slot count into a number only through
    :func:`engine_slots`."""

    instance_id: int
    kv_capacity_tokens: int | None
    block_size: int | None
    max_num_seqs: int | None
    latency_model: LatencyModel | None = None  # the model the policy plans with, when one is known
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    sources: Mapping[str, str] = field(default_factory=dict)


def engine_slots(instances: Sequence[InstanceInfo]) -> int:
    """The fewest slots (``max_num_seqs``) of ``instances``: the one function a policy calls for
    it. An instance without one (a hand-made InstanceInfo) counts as schedlab's stated assumption
    (runners.engines.beliefs.ASSUMED, 256), never a policy's private guess."""
    from runners.engines.beliefs import ASSUMED

    assumed = int(ASSUMED["max_num_seqs"][0])
    return min((info.max_num_seqs if info.max_num_seqs else assumed for info in instances), default=assumed)


@dataclass(slots=True)
class Dispatch:
    """Send ``request_id`` to ``instance``. ``max_tokens`` None = the rest of its target output.

    ``priority`` (lower runs first) reaches engines that accept it (vLLM's priority policy,
    the simulator's priority mode); others ignore it. ``engine_args``: per-request values for
    an in-engine scheduler (vLLM's ``vllm_xargs``, read by the scheduler class as
    ``request.sampling_params.extra_args``; names in runners.schedulers.vllm); engines
    that do not accept them (and the simulator) ignore them.
    """

    request_id: str
    instance: int
    max_tokens: int | None = None
    priority: int | None = None
    engine_args: Mapping[str, int | float | str] | None = None


@dataclass(frozen=True)
class Decision:
    """Dispatches to make now, and the time (seconds) to be asked again even if nothing happens.

    ``cancels`` are in-flight requests to abort first (their progress in that dispatch is lost,
    no completion is reported for it); the policy has already taken them back as pending.
    """

    dispatches: list[Dispatch] = field(default_factory=list)
    wake_at: float | None = None
    cancels: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Completion:
    """A dispatch ended. ``done`` False means a slice ended with output still to generate."""

    request_id: str
    instance: int
    tokens_this_dispatch: int
    tokens_total: int
    done: bool


@dataclass(frozen=True)
class TelemetrySample:
    """An engine instance's state at ``t_s``: KV usage 0-1, request counts, cumulative preemptions.

    ``decode_step_s`` is the engine's own per-step decode latency (seconds per output token of a
    running request) averaged over the interval since the previous sample, where the engine
    reports it (the simulator per step; vLLM from its inter-token-latency histogram's deltas);
    None when it does not, or when no decode step ran in the interval."""

    instance: int
    t_s: float
    kv_usage: float | None
    running: int | None
    waiting: int | None
    preemptions: int | None
    decode_step_s: float | None = None


#: A policy's parameters type: ``self.params`` is typed by it, so a policy reads exactly the fields
#: (and their ``Literal`` choices) its own Params model declares.
P = TypeVar("P", bound=PolicyParams, default=PolicyParams)


class SchedulerPolicy(Generic[P]):
    """Base class, generic over the parameters type: ``class FCFSPolicy(SchedulerPolicy[FCFSParams])``.
    Subclasses set ``name``, ``summary``, ``paper`` and ``Params`` (the class the registry, CLI
    and Launch form read), which must be the type argument or a subclass of it (checked when the
    class is defined).

    The default bookkeeping tracks which requests are held (``pending``, arrival order) and
    which are in flight on each instance; subclasses override :meth:`decide`.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    #: True for the client side of an in-engine scheduler (runners/schedulers/in_engine.py): the
    #: policy itself runs inside a vLLM that schedlab launches
    in_engine: ClassVar[bool] = False
    #: The engine limits the policy promises to keep by itself, checked by ``check-scheduler``
    #: (runners.run.conformance): ``"slots"``: never more requests in flight on an
    #: instance than its ``max_num_seqs``; ``"kv"``: at every dispatch, the KV footprint of the
    #: requests in flight on that instance, the dispatched one included - each one's prompt plus
    #: every token generated for it so far (earlier slices and the current dispatch), tokens -
    #: stays within its ``kv_capacity_tokens``. Empty: it promises neither (the engine queues
    #: or preempts what does not fit).
    admission_limits: ClassVar[frozenset[str]] = frozenset()
    #: The most requests waiting on one instance the policy can decide over, by design (it raises
    #: PolicyError beyond it, e.g. an exhaustive search); None: no limit. check-scheduler counts
    #: a PolicyError from decide beyond this size as a refused case (n/a), and as a failure else.
    max_waiting: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Refuse a class whose ``Params`` is not its type argument (or a subclass of it): the
        form would then draw one model while the policy reads another."""
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if not (isinstance(origin, type) and issubclass(origin, SchedulerPolicy)):
                continue
            for argument in get_args(base):
                if isinstance(argument, type) and not issubclass(cls.Params, argument):
                    raise TypeError(
                        f"{cls.__name__}.Params is {cls.Params.__name__}, expected {argument.__name__} "
                        f"(the parameters type of {base}) or a subclass of it"
                    )

    def __init__(self, params: P | None = None) -> None:
        # Params is P or a subclass of it (__init_subclass__), so its instance is a P
        self.params: P = params if params is not None else cast(P, self.Params())
        self.instances: list[InstanceInfo] = []
        self.pending: dict[str, Request] = {}
        self.in_flight: dict[int, set[str]] = {}
        self.requests: dict[str, Request] = {}
        self.tokens_done: dict[str, int] = {}
        #: every request of the run (on_workload): an oracle's only source of this run's lengths
        self.workload: Sequence[Request] = ()
        #: task -> output tokens of a calibration sample outside the run (on_calibration)
        self.calibration: Mapping[str, Sequence[int]] = {}

    # -- events ------------------------------------------------------------------------------
    def on_workload(self, requests: Sequence[Request]) -> None:
        """Every request the run will send, once, before :meth:`start` (kept as ``workload``).
        Their target lengths and this run's statistics of them are the run's own future: only an
        oracle the user chose may read them (output_predictor oracle, output_prior
        workload-oracle), and its results are labelled as such."""
        self.workload = requests

    def on_calibration(self, outputs: Mapping[str, Sequence[int]]) -> None:
        """Output lengths (tokens) per task of a calibration sample of the same datasets that the
        run does not send (runners.workload.builder), once, before :meth:`start` (kept as
        ``calibration``): the profiling data output_prior calibration starts from."""
        self.calibration = outputs

    def prepare(self) -> None:
        """Once per run, after :meth:`on_calibration` and before the run's clock starts: load or
        compile what ``decide`` needs (numba kernels, say) on small made-up inputs, so the first
        ``decide`` is not stalled by it. Its time is charged to no request and does not count
        against ``scheduler.decide_limit_s`` (a cold numba cache compiles slo-sa's annealer in
        about 13 s on 2 cores). Default: nothing."""

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        self.instances = list(instances)
        self.in_flight = {info.instance_id: set() for info in instances}

    def on_arrival(self, request: Request, now: float) -> None:
        self.requests[request.request_id] = request
        self.pending[request.request_id] = request
        self.tokens_done[request.request_id] = 0

    def on_first_token(self, request_id: str, instance: int, now: float) -> None:
        """The request's first token of this dispatch arrived."""

    def on_completion(self, completion: Completion, now: float) -> None:
        self.in_flight[completion.instance].discard(completion.request_id)
        self.tokens_done[completion.request_id] = completion.tokens_total
        if not completion.done:
            self.pending[completion.request_id] = self.requests[completion.request_id]

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        """The dispatch failed for good; the driver records it as failed."""
        self.in_flight[instance].discard(request_id)

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        """A telemetry sample from an instance."""

    # -- decisions ---------------------------------------------------------------------------
    def decide(self, now: float) -> Decision:
        raise NotImplementedError

    # -- helpers for subclasses --------------------------------------------------------------
    def _take(
        self, request_id: str, instance: int, max_tokens: int | None = None, priority: int | None = None
    ) -> Dispatch:
        """Move a pending request to ``instance``'s in-flight set and return its Dispatch."""
        del self.pending[request_id]
        self.in_flight[instance].add(request_id)
        return Dispatch(request_id, instance, max_tokens, priority)

    def least_loaded_instance(self) -> int:
        """The instance with the fewest requests in flight (lowest id on ties)."""
        if len(self.in_flight) == 1:
            return next(iter(self.in_flight))
        return min(self.in_flight, key=lambda instance: (len(self.in_flight[instance]), instance))

    def remaining_tokens(self, request_id: str) -> int:
        return self.requests[request_id].target_output_tokens - self.tokens_done[request_id]
