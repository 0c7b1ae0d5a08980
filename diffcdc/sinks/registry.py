"""Every sink type diffcdc knows: a type name → its plug-in (:mod:`diffcdc.sinks.plugin`).

The built-in sinks are registered by module path and loaded when first asked for (a plug-in
module is cheap: its config model, no client library); another package, or a test, registers
its own with :func:`register_sink` (and :func:`unregister_sink`, or :func:`registered_sink` for
a block). Whatever depends on a sink's type reads it here: a config's sink entries (validated
against the types known when they are validated) and their error texts, ``status``, ``diffcdc drop``, the executors' import check, the state-root checks and the
sink objects a run uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from diffcdc.errors import ConfigError, UsageError
from diffcdc.sinks.plugin import ResultFiles, SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState

#: The built-in sink types: type → ``module:class`` of its plug-in (loaded when first asked for).
BUILTIN: Mapping[str, str] = {
    "open_mirroring": "diffcdc.sinks.openmirroring.plugin:OpenMirroringPlugin",
    "delta": "diffcdc.sinks.delta.plugin:DeltaPlugin",
    "kafka": "diffcdc.sinks.kafka.plugin:KafkaPlugin",
}

_REGISTERED: dict[str, type[SinkPlugin]] = {}


def register_sink(plugin: type[SinkPlugin]) -> None:
    """Make a sink type known (its package calls this once, when it is imported)."""
    kind = getattr(plugin, "type", None)
    if not isinstance(kind, str) or not isinstance(getattr(plugin, "config", None), type) or \
            not callable(getattr(plugin, "build", None)):
        raise UsageError(f"sink plug-in {plugin.__qualname__} lacks its type, config or build",
                         hint="subclass diffcdc.sinks.plugin.SinkPlugin and set all three")
    known = _REGISTERED.get(kind)
    if (known is not None and known is not plugin) or (kind in BUILTIN and known is None):
        raise UsageError(f"sink type {kind!r} is registered already",
                         hint="give the plug-in a type of its own")
    _REGISTERED[kind] = plugin


def unregister_sink(sink_type: str) -> None:
    """Forget a sink type :func:`register_sink` made known (a built-in one stays)."""
    if sink_type not in BUILTIN:
        _REGISTERED.pop(sink_type, None)


@contextmanager
def registered_sink(plugin: type[SinkPlugin]) -> Iterator[type[SinkPlugin]]:
    """``plugin`` registered for the block only."""
    register_sink(plugin)
    try:
        yield plugin
    finally:
        unregister_sink(plugin.type)


def sink_plugin(sink_type: str) -> type[SinkPlugin] | None:
    """The plug-in of a sink type (None: not one this diffcdc knows, e.g. in a newer state)."""
    found = _REGISTERED.get(sink_type)
    if found is None and sink_type in BUILTIN:
        module, name = BUILTIN[sink_type].split(":")
        found = _REGISTERED[sink_type] = getattr(importlib.import_module(module), name)
    return found


def builtin_sinks() -> tuple[type[SinkPlugin], ...]:
    """The built-in sink types' plug-ins."""
    return tuple(p for t in BUILTIN if (p := sink_plugin(t)) is not None)


def sink_plugins() -> tuple[type[SinkPlugin], ...]:
    """Every sink type known now: the built-in ones, then those :func:`register_sink` made
    known (a config's sink entries validate against these, when they are validated)."""
    return builtin_sinks() + tuple(p for t, p in _REGISTERED.items() if t not in BUILTIN)


def plugin_of(config: Any) -> type[SinkPlugin]:
    """The plug-in of a validated sink config (its type is always a registered one)."""
    found = sink_plugin(config.type)
    if found is None:
        raise ConfigError(f"unknown sink type {config.type!r}",
                          hint="a sink type registered with diffcdc.sinks.registry.register_sink")
    return found


def build_sink(config: Any, table: SinkTable, state: TableState) -> Sink:
    """The sink object for one configured sink of a table."""
    plugin = sink_plugin(getattr(config, "type", ""))
    if plugin is None:
        raise ConfigError(f"unknown sink type {getattr(config, 'type', config)!r}", table=table.name)
    return plugin.build(config, table, state)


def executor_modules() -> tuple[str, ...]:
    """The loaded sinks' modules whose code runs in Spark tasks on the executors."""
    builtin_sinks()  # every built-in one loaded: their modules are asked for before any run
    return tuple(m for p in _REGISTERED.values() for m in p.capabilities.executor_modules)


def sink_result(sink_type: str, manifest: Mapping[str, Any]) -> ResultFiles:
    """What a committed sink entry adds to its snapshot's result (nothing for an unknown type)."""
    plugin = sink_plugin(sink_type)
    return plugin.result(manifest) if plugin is not None else ResultFiles()


def sink_status(sink_type: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``status``'s fields of a committed sink entry after ``rows`` (``target`` first)."""
    plugin = sink_plugin(sink_type)
    return plugin.status(manifest) if plugin is not None else {"target": manifest.get("target")}
