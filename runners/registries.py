"""The one way schedlab registers named things: :class:`Registry`, a read-only mapping from a name
to an item of one kind, filled with :meth:`Registry.register`. Schedulers
(``runners.registry.SCHEDULERS``), engine adapters (``runners.engines.adapters.ADAPTERS``),
importers of peers' files (``runners.imports.IMPORTERS``) and the run and request metrics
(``runners.metrics.catalog.METRICS``) are registries; the CLI, the pages and the help list from
them, so adding one is registering it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from runners.errors import SchedlabError, UnknownNameError

T = TypeVar("T")


@dataclass(frozen=True)
class Deferred:
    """An item not yet imported: ``target`` is ``"package.module:attribute"``, imported on the
    first lookup (so listing names costs no import; a policy's numba kernels load only when a run
    uses it). ``check`` is called with the name and the loaded item and raises SchedlabError when
    they disagree."""

    target: str
    check: Callable[[str, Any], None] | None = None

    def load(self, name: str, kind: str) -> Any:
        module_name, _, attribute = self.target.partition(":")
        try:
            item = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise SchedlabError(f"{kind} {name!r}: cannot load {self.target}: {exc}") from exc
        if self.check is not None:
            self.check(name, item)
        return item


class Registry(Mapping[str, T]):
    """Names -> items of one ``kind`` (a word for messages: "scheduler", "engine"), in the order
    they were registered; ``field`` is the input field a name comes from (``scheduler.name``),
    named by :meth:`lookup`'s error."""

    def __init__(
        self,
        kind: str,
        field: str,
        items: Iterable[tuple[str, T]] = (),
        discover: Callable[[Registry[T]], None] | None = None,
    ) -> None:
        self.kind = kind
        self.field = field
        self._items: dict[str, T | Deferred] = {}
        self._discover = discover  # run once, before the first question about names
        for name, item in items:
            self.register(name, item)

    def _discovered(self) -> None:
        """Run the ``discover`` hook (it may register more items) the first time it is due."""
        if self._discover is not None:
            discover, self._discover = self._discover, None
            discover(self)

    def register_deferred(self, name: str, target: str, check: Callable[[str, Any], None] | None = None) -> None:
        """Register ``name`` for the item at ``target`` (``"module:attribute"``), imported on its
        first lookup (:class:`Deferred`); a taken name is refused as by :meth:`register`."""
        self._add(name, Deferred(target, check))

    def _add(self, name: str, item: T | Deferred) -> None:
        if not isinstance(name, str) or not name:
            raise SchedlabError(f"a {self.kind} needs a non-empty name; got {name!r}")
        if name in self._items:
            raise SchedlabError(f"two {self.kind}s are named {name!r}: {self._items[name]!r} and {item!r}")
        self._items[name] = item

    def _resolved(self, name: str) -> T:
        self._discovered()
        item = self._items[name]
        if isinstance(item, Deferred):
            loaded = cast(T, item.load(name, self.kind))
            self._items[name] = loaded
            return loaded
        return item

    def register(self, name: str, item: T) -> T:
        """Add ``item`` under ``name`` and return it; SchedlabError, one line, when ``name`` is
        not a non-empty string or is taken (two things of one kind never share a name)."""
        self._add(name, item)
        return item

    def lookup(self, name: str) -> T:
        """The item named ``name``; UnknownNameError naming :attr:`field` and the known names."""
        try:
            return self._resolved(name)
        except (KeyError, TypeError):
            raise UnknownNameError(self.field, name, list(self)) from None

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its item (KeyError when it is not registered)."""
        item = self._resolved(name)
        del self._items[name]
        return item

    def __getitem__(self, name: str) -> T:
        return self._resolved(name)

    def __setitem__(self, name: str, item: T) -> None:
        """``registry[name] = item`` is :meth:`register` (a taken name is refused)."""
        self.register(name, item)

    def __delitem__(self, name: str) -> None:
        del self._items[name]

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is registered, without importing a deferred item."""
        self._discovered()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._discovered()
        return iter(self._items)

    def __len__(self) -> int:
        self._discovered()
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"
