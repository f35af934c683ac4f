"""The engine adapters: one module per serving engine (see :mod:`runners.engines.adapters.base`).

Every module of this package that defines an :class:`EngineAdapter` subclass is found here, so
adding an engine is adding its module: the config union (``runners.run.config``), the registry, the
CLI, telemetry's metric names, attach-time detection, discovery and the Launch page read
:data:`ADAPTERS`.
"""

from __future__ import annotations

import importlib
import pkgutil

from runners.engines.adapters.base import Availability, Capabilities, EngineAdapter, FormField, MetricNames
from runners.registries import Registry

__all__ = [
    "ADAPTERS",
    "Availability",
    "Capabilities",
    "EngineAdapter",
    "FormField",
    "MetricNames",
    "adapter_for",
    "detect_adapter",
    "GenericOpenAI",
]


def _discover() -> dict[str, type[EngineAdapter]]:
    found: list[type[EngineAdapter]] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base":
            continue
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        for value in vars(loaded).values():
            if (
                isinstance(value, type)
                and issubclass(value, EngineAdapter)
                and value is not EngineAdapter
                and value.__module__ == loaded.__name__
            ):
                found.append(value)
    found.sort(key=lambda cls: (cls.order, cls.name))
    return {cls.name: cls for cls in found}


class GenericOpenAI(EngineAdapter):
    """An attached server schedlab does not recognise: only the standard OpenAI fields are sent."""

    name = "openai"
    display_name = "an OpenAI-compatible server"
    summary = "attach to running OpenAI-compatible servers by URL"
    metrics = MetricNames(prefix="")


#: Engine name -> adapter, in the order pages and help list them.
ADAPTERS: Registry[type[EngineAdapter]] = Registry("engine", "engine.kind", _discover().items())


def adapter_for(kind: str) -> type[EngineAdapter]:
    """The adapter of engine ``kind`` (an attached server of unknown kind: :class:`GenericOpenAI`)."""
    return ADAPTERS.get(kind, GenericOpenAI)


def detect_adapter(metrics_text: str | None, owned_by: object) -> type[EngineAdapter]:
    """Which engine an attached server runs: the adapter whose metric prefix its ``/metrics``
    page uses, else whose ``owned_by`` its ``/v1/models`` card gives, else :class:`GenericOpenAI`."""
    if metrics_text:
        for adapter in ADAPTERS.values():
            if adapter.metrics.prefix and adapter.metrics.prefix in metrics_text:
                return adapter
    for adapter in ADAPTERS.values():
        if owned_by in adapter.owned_by:
            return adapter
    return GenericOpenAI
