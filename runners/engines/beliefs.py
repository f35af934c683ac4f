"""What a policy believes about an engine instance, and where each belief came from (issue 48).

A policy sees an engine through :class:`runners.schedulers.base.InstanceInfo`: its KV capacity
(tokens), block size (tokens), slots (``max_num_seqs``: requests running at once), per-step token
budget (``max_num_batched_tokens``, tokens), whether it caches prefixes, and the latency model it
plans with. A verdict can only move from the simulator to a real engine if the policy believes the
same things on both sides, so every value here carries its source, and one function
(:func:`runners.drivers.base.instance_info`) builds the InstanceInfo of a simulated and of a real
instance alike.

Sources, in the order a real instance's value is taken (the first that gives one wins):

1. the launch config, when schedlab launched the server (``--max-num-seqs``);
2. the attach config (``engine.max_num_seqs``, ``engine.max_num_batched_tokens``);
3. what the server says (vLLM's ``/metrics`` ``cache_config_info`` labels and, with
   ``VLLM_SERVER_DEV_MODE=1``, ``/server_info``; SGLang's ``/server_info``);
4. the engine's documented default (the adapters' :meth:`documented_limits`), said to be one;
5. schedlab's stated assumption for an engine whose default is unknown (:data:`ASSUMED`).

No policy keeps its own fallback: :func:`runners.schedulers.base.engine_slots` is the one place a
policy turns a missing slot count into a number, and it takes :data:`ASSUMED`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

#: The run folder's file that records the beliefs (runners.store.models.EngineRecord).
ENGINE_FILE = "engine.json"

#: Each belief: its record name, the label a page prints, and its unit ("" for a flag).
LIMITS: tuple[tuple[str, str, str], ...] = (
    ("kv_capacity_tokens", "KV capacity", "tokens"),
    ("block_size", "block size", "tokens"),
    ("max_num_seqs", "slots", "requests"),
    ("max_num_batched_tokens", "batched tokens", "tokens per step"),
    ("prefix_caching", "prefix cache", ""),
)
#: The limits' record names, in order (InstanceBeliefs' fields).
LIMIT_NAMES: tuple[str, ...] = tuple(name for name, _, _ in LIMITS)
#: The latency model's belief: its record name and label.
LATENCY = ("latency_model", "latency model")
LABELS: dict[str, str] = {name: label for name, label, _ in LIMITS} | {LATENCY[0]: LATENCY[1]}

#: What schedlab assumes where neither the engine, the config nor a documented default gives a
#: value: (value, why). 256 slots is vLLM's OpenAI-server default on most GPUs; 8,192 batched
#: tokens is a profile's default.
ASSUMED: dict[str, tuple[Any, str]] = {
    "max_num_seqs": (256, "schedlab's assumption (no engine default known): set engine.max_num_seqs"),
    "max_num_batched_tokens": (8192, "schedlab's assumption (no engine default known)"),
}
NOT_KNOWN = "not discovered"


@dataclass(frozen=True)
class Belief:
    """One value a policy sees, and where it came from (a sentence: "launch config
    (--max-num-seqs)", "vLLM default, not discovered: ...")."""

    value: Any
    source: str

    def record(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


def choose(name: str, candidates: Iterable[tuple[Any, str]]) -> Belief:
    """The first candidate (value, source) whose value is not None; else :data:`ASSUMED`'s
    value for ``name``, else None "not discovered"."""
    for value, source in candidates:
        if value is not None:
            return Belief(value, source)
    if name in ASSUMED:
        value, why = ASSUMED[name]
        return Belief(value, why)
    return Belief(None, NOT_KNOWN)


@dataclass(frozen=True)
class InstanceBeliefs:
    """An instance's limits (:data:`LIMITS`), each a :class:`Belief`."""

    kv_capacity_tokens: Belief
    block_size: Belief
    max_num_seqs: Belief
    max_num_batched_tokens: Belief
    prefix_caching: Belief
    latency: Belief = field(default_factory=lambda: Belief(None, "none (no engine.profile)"))

    @classmethod
    def of(cls, instance: Any, source: str) -> "InstanceBeliefs":
        """An instance's own limit attributes (None where it has none), all from ``source``: what
        a driver takes for an instance given without beliefs (tests, hand-made drivers)."""
        return cls(*(Belief(getattr(instance, name, None), source) for name in LIMIT_NAMES))

    def value(self, name: str) -> Any:
        return getattr(self, name).value

    def with_latency(self, value: Any, source: str) -> "InstanceBeliefs":
        return replace(self, latency=Belief(value, source))

    def record(self) -> dict[str, dict[str, Any]]:
        """{name: {"value", "source"}}, the engine.json ``beliefs`` of one instance."""
        out = {name: getattr(self, name).record() for name in LIMIT_NAMES}
        out[LATENCY[0]] = self.latency.record()
        return out


def simulated_beliefs(resolved: Any, config: Any) -> InstanceBeliefs:
    """The beliefs of a simulated instance: the config's overrides (``engine.<name>``) or the
    profile's values with the profile's own sources (a measured profile says where each came
    from; a preset is its own source)."""
    profile = resolved.profile
    where = f"profile {config.profile}" if config.profile else f"preset {config.preset}"
    stated = dict(profile.limit_sources or {})

    def from_profile(name: str) -> str:
        return f"{where}: {stated[name]}" if name in stated else where

    def pick(name: str, resolved_value: Any) -> Belief:
        override = getattr(config, name, None)
        if override is not None:
            return Belief(resolved_value, f"engine.{name}")
        return Belief(resolved_value, from_profile(name))

    capacity_source = (
        "engine.kv_capacity_tokens"
        if config.kv_capacity_tokens is not None
        else "engine.model and engine.gpu"
        if config.model is not None or config.gpu is not None
        else from_profile("kv_capacity_tokens")
    )
    return InstanceBeliefs(
        kv_capacity_tokens=Belief(resolved.kv_capacity_tokens, capacity_source),
        block_size=pick("block_size", resolved.block_size),
        max_num_seqs=pick("max_num_seqs", resolved.max_num_seqs),
        max_num_batched_tokens=pick("max_num_batched_tokens", resolved.max_num_batched_tokens),
        prefix_caching=Belief(config.prefix_caching, "engine.prefix_caching"),
    )


def real_beliefs(
    *,
    adapter: Any,
    config: Any,
    launched: bool,
    discovered: Mapping[str, tuple[Any, str]],
) -> InstanceBeliefs:
    """The beliefs of a real instance from its launch or attach ``config`` and what the server
    said (``discovered``: name -> (value, source)), then the adapter's documented defaults, then
    :data:`ASSUMED` (see the module docstring for the order)."""
    engine = adapter.display_name
    documented = adapter.documented_limits(config if launched else None)
    launch: dict[str, tuple[Any, str]] = {}
    if launched:
        for name, (value, flag) in adapter.launch_limits(config).items():
            launch[name] = (value, f"launch config ({flag})")
    configured = {
        name: (getattr(config, name, None), f"engine.{name}")
        for name in ("max_num_seqs", "max_num_batched_tokens")
        if not launched
    }

    def belief(name: str) -> Belief:
        candidates = [launch.get(name), configured.get(name), discovered.get(name)]
        default = documented.get(name)
        if default is not None:
            candidates.append((default[0], f"{engine} default, not discovered: {default[1]}"))
        return choose(name, [c for c in candidates if c is not None])

    return InstanceBeliefs(**{name: belief(name) for name in LIMIT_NAMES})


def latency_belief(planning: Any) -> tuple[Any, str]:
    """(value, source) of the latency-model belief from a run's
    :class:`~runners.engines.planning_model.PlanningModel` (None: the policy has none): the value
    is its record (source, oracle flag, coefficients, fit error)."""
    if planning is None:
        return None, "none (no engine.profile)"
    record = planning.record()
    source = (
        "the simulated engine's own model"
        if planning.oracle
        else "the profile's model refitted with a measured profile's noise (the workload seed's)"
    )
    return record, source


def differences(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None) -> list[str]:
    """One phrase per belief two runs' instances held differently ("slots: 4 vs 256"), from
    engine.json ``beliefs`` records ({name: {"value", "source"}}); empty when either is unknown."""
    if not left or not right:
        return []
    out = []
    for name, label in LABELS.items():
        a, b = _believed((left.get(name) or {}).get("value")), _believed((right.get(name) or {}).get("value"))
        if a != b:
            out.append(f"{label}: {_show(a)} vs {_show(b)}")
    return out


def _believed(value: Any) -> Any:
    """What a policy believed in a belief's recorded value: a latency model's planning record
    without its ``run_range`` (the model's error over the range the run used: a report on the
    run's own token counts, which differ between a real server's tokenizer and the simulator's,
    not something the policy plans with)."""
    if isinstance(value, Mapping) and "run_range" in value:
        return {key: item for key, item in value.items() if key != "run_range"}
    return value


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, Mapping):  # a latency model's planning record
        fit = value.get("fit") or {}
        errors = [
            f"{phase} {fit[key]:.0%}"
            for phase, key in (("prefill", "error_vs_engine_prefill"), ("decode", "error_vs_engine_decode"))
            if isinstance(fit.get(key), (int, float))
        ]
        text = str(value.get("source", "?")) + (" (oracle)" if value.get("oracle") else "")
        text += f" (error against its source model: {', '.join(errors)})" if errors else ""
        return text + _run_range_words(value.get("run_range"))
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _run_range_words(run_range: Any) -> str:
    """The planning model's error over the range the run used (runners.engines.planning_model.
    run_range_error), said after its grid error; "" when not recorded."""
    if not isinstance(run_range, Mapping) or not isinstance(run_range.get("error_prefill"), (int, float)):
        return ""
    from runners.engines.planning_model import GRID_BATCHES, GRID_INPUTS

    text = (
        f"; over this run's range (batches up to {run_range.get('max_batch')}, prompts up to "
        f"{run_range.get('max_prompt_tokens')} tokens): prefill {run_range['error_prefill']:.0%}, decode "
        f"{run_range['error_decode']:.0%}"
    )
    if run_range.get("extrapolated"):
        text += (
            f", extrapolated beyond the profiling grid (batches {min(GRID_BATCHES)}-{max(GRID_BATCHES)}, prompts "
            f"{min(GRID_INPUTS)}-{max(GRID_INPUTS)} tokens)"
        )
    return text


def describe(beliefs: Mapping[str, Any]) -> list[str]:
    """One line per belief ("slots 256: vLLM default, not discovered: ..."), for a run's output."""
    lines = []
    for name, label in LABELS.items():
        entry = beliefs.get(name) or {}
        lines.append(f"{label} {_show(entry.get('value'))}: {entry.get('source', NOT_KNOWN)}")
    return lines


def run_beliefs(folder: str | Path) -> dict[str, Any] | None:
    """Instance 0's beliefs from a run folder's engine.json (version 3 on), or None (no file,
    an earlier version, or a file that cannot be read)."""
    import json

    try:
        data = json.loads((Path(folder) / ENGINE_FILE).read_text(encoding="utf-8"))
        beliefs = data["instances"][0]["beliefs"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return beliefs if isinstance(beliefs, dict) else None


def beliefs_note(runs: Sequence[tuple[str, str | Path]]) -> str | None:
    """One line when the policies of ``runs`` ((label, folder) pairs, the first the reference)
    believed different things about their engines ("the policies did not believe the same about
    the engine: B vs A: slots 4 vs 256"); None when they agree or a side is not recorded."""
    if len(runs) < 2:
        return None
    first_label, first_folder = runs[0]
    reference = run_beliefs(first_folder)
    parts = []
    for label, folder in runs[1:]:
        found = differences(run_beliefs(folder), reference)
        if found:
            parts.append(f"{label} vs {first_label}: " + "; ".join(found))
    if not parts:
        return None
    return "the policies did not believe the same about their engines (engine.json beliefs): " + " | ".join(parts)
