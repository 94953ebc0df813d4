"""One registry mechanism for everything chosen by name: decoding strategies, datasets,
model presets.

A :class:`Registry` maps names to entries. The package's own entries are given as
``"module:attribute"`` paths, imported on first use (so a registry that lives on a low floor
may name an entry defined higher up, and listing the names loads nothing heavy). Anything
else registers the same way from outside the package, in either of two ways:

- an entry point of the registry's ``group`` in the other package's ``pyproject.toml``::

      [project.entry-points."transformer_book.decoding_strategies"]
      topk = "my_package.topk:TopK"

- or a module that calls :meth:`Registry.register` when imported, named by the CLI's
  ``--plugin MODULE`` (:func:`load_plugin`).

Every choice the CLI offers, every refusal of an unknown name and CONTRIBUTING's module map
read the names from here (``scripts/generate_docs.py``), so a new entry reaches them with no
other edit.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar, cast

from transformer_book.util.validation import bad_input, require

__all__ = ["REGISTRIES", "Registry", "load_plugin"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> entries of one kind (``kind``, for messages), open to outside packages
    through the entry-point ``group``.

    ``builtins``: the package's own entries, each the entry itself or a
    ``"module:attribute"`` path imported when first asked for. ``check``, if given, is
    called with each entry when it is first loaded, and raises a ``BookError`` for an entry
    of the wrong kind.
    """

    def __init__(self, kind: str, group: str, builtins: dict[str, T | str],
                 check: Callable[[str, T], None] | None = None) -> None:
        self.kind, self.group, self._check = kind, group, check
        self._entries: dict[str, T | str] = dict(builtins)
        self._plugins_loaded = False
        REGISTRIES[group] = self

    def register(self, name: str, entry: T | str) -> T | str:
        """Add ``entry`` (or its ``"module:attribute"`` path) as ``name``; a name already
        taken is refused. Returns the entry."""
        require(isinstance(name, str) and name.strip() == name and name != "", "name",
                f"a {self.kind} name (a non-empty string without surrounding spaces)",
                repr(name))
        self._load_plugins()
        require(name not in self._entries, "name", f"a {self.kind} name not yet registered "
                f"(taken: {', '.join(self._entries)})", repr(name))
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's throwaway entry)."""
        require(name in self._entries, "name", f"a registered {self.kind}", repr(name))
        del self._entries[name]

    def names(self) -> tuple[str, ...]:
        """Every name, the package's first, in registration order."""
        self._load_plugins()
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def get(self, name: str, argument: str | None = None) -> T:
        """The entry ``name``, loaded; an unknown name is a ``BookError`` naming
        ``argument`` (default: the registry's kind) and the names there are."""
        if name not in self.names():
            raise bad_input(argument or self.kind, f"one of {sorted(self.names())}", repr(name))
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._resolve(name, entry)
            if self._check is not None:
                self._check(name, entry)
            self._entries[name] = entry
        return entry

    def items(self) -> list[tuple[str, T]]:
        """Every ``(name, entry)``, loaded."""
        return [(name, self.get(name)) for name in self.names()]

    def _resolve(self, name: str, path: str) -> T:
        module, _, attribute = path.partition(":")
        try:
            value = cast(T, getattr(importlib.import_module(module), attribute))
        except (ImportError, AttributeError) as error:
            raise bad_input(f"{self.kind} {name!r}", "an importable module:attribute",
                            f"{path} ({error})") from None
        return value

    def _load_plugins(self) -> None:
        """The entry points of :attr:`group` installed packages declare, once."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for point in entry_points(group=self.group):
            if point.name not in self._entries:
                self._entries[point.name] = point.value


#: Every registry, by entry-point group (what the generated docs list).
REGISTRIES: dict[str, Registry[Any]] = {}


def load_plugin(module: str, argument: str = "--plugin") -> None:
    """Import ``module``, which registers its entries when imported (the CLI's
    ``--plugin``); a module that cannot be imported is a ``BookError``."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise bad_input(argument, "an importable module that registers entries",
                        f"{module!r} ({error})") from None
