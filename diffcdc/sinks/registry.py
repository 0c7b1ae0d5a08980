"""Every sink type diffcdc knows: a type name → its plug-in (:mod:`diffcdc.sinks.plugin`).

The built-in sinks are registered by module path and loaded when first asked for (a plug-in
module is cheap: its config model, no client library); another package, or a test, registers
its own with :func:`register_sink` (and :func:`unregister_sink`, or :func:`registered_sink` for
a block). Whatever depends on a sink's type reads it here: a config's sink entries (validated
against the types known when they are validated) and their error texts, ``status``, ``diffcdc drop``, the executors' import check, the state-root checks and the
sink objects a run uses.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from diffcdc.errors import ConfigError, DiffcdcError, UsageError
from diffcdc.extras import Extra
from diffcdc.plugin_registry import PluginRegistry, first_line
from diffcdc.sinks.plugin import Capabilities, ResultFiles, SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.sinks.plugin import Say
    from diffcdc.state.store import TableState

#: The built-in sink types: type → ``module:class`` of its plug-in (loaded when first asked for).
BUILTIN: Mapping[str, str] = {
    "open_mirroring": "diffcdc.sinks.openmirroring.plugin:OpenMirroringPlugin",
    "delta": "diffcdc.sinks.delta.plugin:DeltaPlugin",
    "kafka": "diffcdc.sinks.kafka.plugin:KafkaPlugin",
    "postgres": "diffcdc.sinks.postgres.plugin:PostgresPlugin",
}

T = TypeVar("T")


def _check_declarations(plugin: type[SinkPlugin], kind: str, name: str) -> None:
    """Refuse a plug-in whose declarations a run would trip over later (in every table's run,
    for ``capabilities``): a config model without the sink's id and targets, capabilities,
    extra or path fields of the wrong kind."""
    config = plugin.config
    lacking = [a for a in ("sink_id", "targets") if not hasattr(config, a)]
    if not issubclass(config, BaseModel) or lacking:
        raise UsageError(
            f"sink plug-in {name}: its config {config.__name__} is not a pydantic model "
            f"with a sink_id and targets" + (f" (lacks {', '.join(lacking)})" if lacking else ""),
            hint="see diffcdc.sinks.plugin.SinkPlugin.config and a built-in sink's config model")
    wrong = [field for field, value, kind_ in (
        ("capabilities", plugin.capabilities, Capabilities),
        ("extra", plugin.extra, (Extra, type(None))),
        ("path_fields", plugin.path_fields, tuple),
    ) if not isinstance(value, kind_)] + (
        [] if all(isinstance(f, str) for f in plugin.path_fields or ()) else ["path_fields"])
    if wrong:
        raise UsageError(f"sink plug-in {name}: {', '.join(dict.fromkeys(wrong))} of the wrong "
                         "kind",
                         hint="capabilities: a diffcdc.sinks.plugin.Capabilities; extra: a "
                         "diffcdc.extras.Extra or None; path_fields: a tuple of field names")


_SINKS: PluginRegistry[SinkPlugin] = PluginRegistry("sink", SinkPlugin, BUILTIN,
                                                     _check_declarations)


def register_sink(plugin: type[SinkPlugin]) -> None:
    """Make a sink type known (its package calls this once, when it is imported)."""
    _SINKS.register(plugin)


def unregister_sink(sink_type: str) -> None:
    """Forget a sink type :func:`register_sink` made known (a built-in one stays)."""
    _SINKS.unregister(sink_type)


def registered_sink(plugin: type[SinkPlugin]) -> AbstractContextManager[type[SinkPlugin]]:
    """``plugin`` registered for the block only (one registered before stays registered)."""
    return _SINKS.registered(plugin)


def sink_plugin(sink_type: str) -> type[SinkPlugin] | None:
    """The plug-in of a sink type (None: not one this diffcdc knows, e.g. in a newer state)."""
    return _SINKS.get(sink_type)


def builtin_sinks() -> tuple[type[SinkPlugin], ...]:
    """The built-in sink types' plug-ins."""
    return _SINKS.builtins()


def sink_plugins() -> tuple[type[SinkPlugin], ...]:
    """Every sink type known now: the built-in ones, then those :func:`register_sink` made
    known (a config's sink entries validate against these, when they are validated)."""
    return _SINKS.known()


def plugin_of(config: Any) -> type[SinkPlugin]:
    """The plug-in of a validated sink config (its type is always a registered one)."""
    found = sink_plugin(config.type)
    if found is None:
        raise ConfigError(f"unknown sink type {config.type!r}",
                          hint="a sink type registered with diffcdc.sinks.registry.register_sink")
    return found


def build_sink(config: Any, table: SinkTable, state: TableState) -> Sink:
    """The sink object for one configured sink of a table.

    A plug-in's failure here names the sink (not only the table), and a sink whose ``publish``
    does not take the ``checked=`` keyword the engine passes is refused now, before anything of
    the run is committed, not after each version is (a sink that could never publish them)."""
    plugin = sink_plugin(getattr(config, "type", ""))
    if plugin is None:
        raise ConfigError(f"unknown sink type {getattr(config, 'type', config)!r}", table=table.name)
    sink_id = getattr(config, "sink_id", config.type)
    try:
        sink = plugin.build(config, table, state)
    except (DiffcdcError, OSError):
        raise  # its own one line, or a disk whose failure the caller words
    except Exception as exc:  # noqa: BLE001 - a plug-in's bug: named with its sink
        raise DiffcdcError(
            f"sink {sink_id}: its plug-in {plugin.__qualname__} failed to build it: "
            f"{first_line(exc)}",
            table=table.name,
            hint="check the sink's entry, or fix the plug-in; run again with --debug for the "
            "full trace",
        ) from exc
    if not _takes_checked(sink.publish):
        raise ConfigError(
            f"sink {sink_id}: {type(sink).__qualname__}.publish does not take the keyword "
            "checked= that diffcdc passes (this run committed and published nothing)",
            table=table.name,
            hint="update the sink plug-in: publish(version, manifest, staging_dir, history, *, "
            "checked=False) (see diffcdc.sinks.base)",
        )
    return sink


def _takes_checked(publish: Any) -> bool:
    """Whether a sink's ``publish`` can be called with ``checked=``."""
    try:
        parameters = inspect.signature(publish).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): let the call tell
        return True
    return any(p.kind is p.VAR_KEYWORD or (p.name == "checked" and p.kind in (
        p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)) for p in parameters)


def executor_modules(sink_types: Iterable[str] | None = None) -> tuple[str, ...]:
    """The modules whose code runs in Spark tasks on the executors of the sinks of
    ``sink_types`` (a run's: those its tables use; an unknown type has none), or of every sink
    type known now (None)."""
    plugins = _SINKS.known() if sink_types is None else tuple(
        p for t in dict.fromkeys(sink_types) if (p := _SINKS.get(t)) is not None)
    return tuple(dict.fromkeys(m for p in plugins for m in p.capabilities.executor_modules))


def sink_result(sink_type: str, manifest: Mapping[str, Any]) -> ResultFiles:
    """What a committed sink entry adds to its snapshot's result (nothing for an unknown type)."""
    plugin = sink_plugin(sink_type)
    if plugin is None:
        return ResultFiles()
    return plugin_answer(plugin, "give the files of a committed version",
                         lambda: plugin.result(manifest))


def sink_status(sink_type: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``status``'s fields of a committed sink entry after ``rows`` (``target`` first)."""
    plugin = sink_plugin(sink_type)
    if plugin is None:
        return {"target": manifest.get("target")}
    return plugin_answer(plugin, "give the status of a committed version",
                         lambda: plugin.status(manifest))


def check_sink_target(config: Any, manifest: Mapping[str, Any], table: SinkTable,
                      state_given: bool) -> None:
    """The sink's plug-in checks its target against the manifest of the table's last commit
    (:meth:`SinkPlugin.check_target`; nothing for a sink without ``target_checks``)."""
    plugin = plugin_of(config)
    if plugin.capabilities.target_checks:
        plugin_answer(plugin, f"check the target of sink {config.sink_id} against its last commit",
                      lambda: plugin.check_target(config, manifest, table, state_given),
                      table=table.name)


def sink_published_output(config: Any, table: SinkTable) -> str | None:
    """Where the sink's target already holds diffcdc's output for a table without state
    (:meth:`SinkPlugin.published_output`; None for a sink without ``target_checks``)."""
    plugin = plugin_of(config)
    if not plugin.capabilities.target_checks:
        return None
    return plugin_answer(plugin, f"look for output of sink {config.sink_id} published before",
                         lambda: plugin.published_output(config, table), table=table.name)


def sink_drop_target(config: Any, table: SinkTable) -> str | None:
    """What ``diffcdc drop`` deletes of the sink's output (:meth:`SinkPlugin.drop_target`;
    None for a sink that cannot drop)."""
    plugin = plugin_of(config)
    if not plugin.capabilities.drop:
        return None
    return plugin_answer(plugin, f"name what a drop deletes of sink {config.sink_id}",
                         lambda: plugin.drop_target(config, table), table=table.name)


def drop_sink_output(config: Any, table: SinkTable, say: Say) -> str | None:
    """Delete the sink's output (:meth:`SinkPlugin.drop`); where it was (None: nothing, or a
    sink that cannot drop)."""
    plugin = plugin_of(config)
    if not plugin.capabilities.drop:
        return None
    return plugin_answer(plugin, f"drop the output of sink {config.sink_id}",
                         lambda: plugin.drop(config, table, say), table=table.name)


def plugin_answer(plugin: type[SinkPlugin], what: str, ask: Callable[[], T], *,
                  table: str | None = None) -> T:
    """A plug-in's answer to ``ask`` (``what`` it was asked to do: "give the status of ...");
    its bug (a manifest or an entry it cannot read, anything not a DiffcdcError or an
    OSError) as one line naming it, and ``table`` when given (else the engine's table)."""
    return _SINKS.answer(plugin, what, ask, table=table, passes=(DiffcdcError, OSError))
