"""The one way schedlab registers named things: :class:`Registry`, a read-only mapping from a name
to an item of one kind, filled with :meth:`Registry.register`. Schedulers
(``runners.registry.SCHEDULERS``), engine adapters (``runners.engines.adapters.ADAPTERS``),
importers of peers' files (``runners.imports.IMPORTERS``) and the run and request metrics
(``runners.metrics.catalog.METRICS``) are registries; the CLI, the pages and the help list from
them, so adding one is registering it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar

from runners.errors import SchedlabError, UnknownNameError

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Names -> items of one ``kind`` (a word for messages: "scheduler", "engine"), in the order
    they were registered; ``field`` is the input field a name comes from (``scheduler.name``),
    named by :meth:`lookup`'s error."""

    def __init__(self, kind: str, field: str, items: Iterable[tuple[str, T]] = ()) -> None:
        self.kind = kind
        self.field = field
        self._items: dict[str, T] = {}
        for name, item in items:
            self.register(name, item)

    def register(self, name: str, item: T) -> T:
        """Add ``item`` under ``name`` and return it; SchedlabError, one line, when ``name`` is
        not a non-empty string or is taken (two things of one kind never share a name)."""
        if not isinstance(name, str) or not name:
            raise SchedlabError(f"a {self.kind} needs a non-empty name; got {name!r}")
        if name in self._items:
            raise SchedlabError(f"two {self.kind}s are named {name!r}: {self._items[name]!r} and {item!r}")
        self._items[name] = item
        return item

    def lookup(self, name: str) -> T:
        """The item named ``name``; UnknownNameError naming :attr:`field` and the known names."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise UnknownNameError(self.field, name, list(self._items)) from None

    def unregister(self, name: str) -> T:
        """Remove ``name`` and return its item (KeyError when it is not registered)."""
        return self._items.pop(name)

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __setitem__(self, name: str, item: T) -> None:
        """``registry[name] = item`` is :meth:`register` (a taken name is refused)."""
        self.register(name, item)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._items)})"
