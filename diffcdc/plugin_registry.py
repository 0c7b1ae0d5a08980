"""One registry of plug-in types, as sinks (:mod:`diffcdc.sinks.registry`) and sources
(:mod:`diffcdc.sources.registry`) both keep theirs: a type name → its plug-in class.

The built-in types are named by module path and loaded when first asked for; another package,
or a test, registers its own (:meth:`PluginRegistry.register`, :meth:`~PluginRegistry.unregister`,
:meth:`~PluginRegistry.registered` for a block). A plug-in declared wrongly is refused when it
is registered, in one line naming it: not a class of the registry's base, no type, config or
build, a type that is no plain name, is taken, or differs from a known one only in case, and
what the registry's own check of its declarations finds.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from diffcdc.errors import DiffcdcError, UsageError

P = TypeVar("P")
T = TypeVar("T")

#: What a plug-in type may be called: it is a config file's ``type`` and is named in messages.
TYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")

#: A check of a plug-in's declarations (``plugin``, its ``type``, its name): raises UsageError.
Declarations = Callable[[Any, str, str], None]


class PluginRegistry(Generic[P]):
    """The plug-in types of one kind (``what``: "sink", "source"), each a subclass of ``base``."""

    def __init__(self, what: str, base: type[P], builtin: Mapping[str, str],
                 declarations: Declarations) -> None:
        self.what = what
        self.base = base
        #: The built-in types: type → ``module:class`` of its plug-in (loaded when asked for).
        self.builtin = builtin
        self._declarations = declarations
        self._registered: dict[str, type[P]] = {}

    @property
    def base_name(self) -> str:
        return f"{self.base.__module__}.{self.base.__qualname__}"

    def register(self, plugin: type[P]) -> None:
        """Make a type known (its package calls this once, when it is imported)."""
        name = getattr(plugin, "__qualname__", repr(plugin))
        what, base = self.what, self.base.__name__
        if not isinstance(plugin, type) or not issubclass(plugin, self.base):
            raise UsageError(f"{what} plug-in {name} is not a class deriving from {base}",
                             hint=f"subclass {self.base_name} and register the class")
        kind = getattr(plugin, "type", None)
        if not isinstance(kind, str) or not isinstance(getattr(plugin, "config", None), type) or \
                not callable(getattr(plugin, "build", None)):
            raise UsageError(f"{what} plug-in {name} lacks its type, config or build",
                             hint=f"subclass {self.base_name} and set all three")
        if not TYPE_NAME.fullmatch(kind):
            raise UsageError(f"{what} plug-in {name}: its type {kind!r} is not a plain name",
                             hint="a letter, then letters, digits, '_', '-' or '.' (at most 64)")
        self._declarations(plugin, kind, name)
        known = self._registered.get(kind)
        if (known is not None and known is not plugin) or (kind in self.builtin and known is None):
            raise UsageError(f"{what} type {kind!r} is registered already",
                             hint="give the plug-in a type of its own")
        alike = next((t for t in (*self.builtin, *self._registered)
                      if t != kind and t.lower() == kind.lower()), None)
        if alike is not None:  # ``type = "Delta"`` would name another plug-in than ``"delta"``
            raise UsageError(
                f"{what} type {kind!r} differs from the known type {alike!r} only in case",
                hint="give the plug-in a type of its own")
        self._registered[kind] = plugin

    def unregister(self, kind: str) -> None:
        """Forget a type :meth:`register` made known (a built-in one stays)."""
        if kind not in self.builtin:
            self._registered.pop(kind, None)

    @contextmanager
    def registered(self, plugin: type[P]) -> Iterator[type[P]]:
        """``plugin`` registered for the block only (one registered before stays registered)."""
        kind = getattr(plugin, "type", None)
        before = self._registered.get(kind) if isinstance(kind, str) else None
        self.register(plugin)
        try:
            yield plugin
        finally:
            if before is None:
                self.unregister(plugin.type)  # type: ignore[attr-defined]

    def get(self, kind: str) -> type[P] | None:
        """The plug-in of a type (None: not one this diffcdc knows)."""
        found = self._registered.get(kind)
        if found is None and kind in self.builtin:
            module, name = self.builtin[kind].split(":")
            found = self._registered[kind] = getattr(importlib.import_module(module), name)
        return found

    def builtins(self) -> tuple[type[P], ...]:
        """The built-in types' plug-ins."""
        return tuple(p for t in self.builtin if (p := self.get(t)) is not None)

    def known(self) -> tuple[type[P], ...]:
        """Every type known now: the built-in ones, then those :meth:`register` made known."""
        return self.builtins() + tuple(
            p for t, p in self._registered.items() if t not in self.builtin)

    def loaded(self) -> tuple[type[P], ...]:
        """The types loaded or registered so far (a built-in one not asked for yet is not)."""
        return tuple(self._registered.values())

    def answer(self, plugin: Any, what: str, ask: Callable[[], T], *, table: str | None = None,
               passes: tuple[type[BaseException], ...] = (DiffcdcError,)) -> T:
        """A plug-in's answer to ``ask`` (``what`` it was asked to do: "give the status of ...");
        its bug as one line naming it and ``table`` when given (else the engine's table). What
        ``passes`` goes on as raised: a :class:`DiffcdcError` is its own line already (and a
        caller may let a disk's OSError through to word it itself)."""
        try:
            return ask()
        except passes:
            raise
        except Exception as exc:  # noqa: BLE001 - a plug-in's bug: named with its type
            raise DiffcdcError(
                f"{self.what} type {plugin.type!r}: its plug-in {plugin.__qualname__} failed to "
                f"{what}: {first_line(exc)}",
                table=table,
                hint=f"fix the {self.what} plug-in; run again with --debug for the full trace",
            ) from exc


def first_line(exc: BaseException) -> str:
    """``KeyError: 'endpoint'``: an exception's type and the first line of its text."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}{': ' + first if first else ''}"
