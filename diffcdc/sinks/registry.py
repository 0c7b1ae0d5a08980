"""Every sink type diffcdc has: one line per sink package's plug-in (:mod:`diffcdc.sinks.plugin`).

Whatever depends on a sink's type reads it here: the config union and its error texts, the
table-level landing fields, ``status``, ``diffcdc drop``, the executors' import check, the
state-root checks and the sink objects a run uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from diffcdc.errors import ConfigError
from diffcdc.sinks.delta.plugin import PLUGIN as DELTA
from diffcdc.sinks.kafka.plugin import PLUGIN as KAFKA
from diffcdc.sinks.openmirroring.plugin import PLUGIN as OPEN_MIRRORING
from diffcdc.sinks.plugin import Headline, ResultFiles, SinkPlugin, TableLevel
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState

SINKS: tuple[SinkPlugin[Any], ...] = (OPEN_MIRRORING, DELTA, KAFKA)



def _table_level() -> tuple[SinkPlugin[Any], TableLevel[Any]]:
    (found,) = [(p, p.table_level) for p in SINKS if p.table_level is not None]
    return found


#: The sink type a table may configure at table level (the one sink of a table without
#: ``sinks``, as before sinks existed) and how: the one plug-in with a ``table_level``.
TABLE_SINK, TABLE_LEVEL = _table_level()

_BY_TYPE = {p.type: p for p in SINKS}


def sink_plugin(sink_type: str) -> SinkPlugin[Any] | None:
    """The plug-in of a sink type (None: not one this diffcdc has, e.g. in a newer state)."""
    return _BY_TYPE.get(sink_type)


def plugin_of(config: Any) -> SinkPlugin[Any]:
    """The plug-in of a validated sink config (its type is always a registered one)."""
    return _BY_TYPE[config.type]


def build_sink(config: Any, table: SinkTable, state: TableState) -> Sink:
    """The sink object for one configured sink of a table."""
    plugin = sink_plugin(getattr(config, "type", ""))
    if plugin is None:
        raise ConfigError(f"unknown sink type {getattr(config, 'type', config)!r}", table=table.name)
    return plugin.build(config, table, state)


def executor_modules() -> tuple[str, ...]:
    """The sinks' modules whose code runs in Spark tasks on the executors."""
    return tuple(m for p in SINKS for m in p.executor_modules)


def sink_result(sink_type: str, manifest: Mapping[str, Any]) -> ResultFiles:
    """What a committed sink entry adds to its snapshot's result (nothing for an unknown type)."""
    plugin = sink_plugin(sink_type)
    return plugin.result(manifest) if plugin is not None else ResultFiles()


def sink_status(sink_type: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``status``'s fields of a committed sink entry after ``rows`` (``target`` first)."""
    plugin = sink_plugin(sink_type)
    return plugin.status(manifest) if plugin is not None else {"target": manifest.get("target")}


def headline(items: Sequence[Mapping[str, Any]]) -> Headline | None:
    """``status``'s table-level headline: from the first of the sink items that gives one."""
    for item in items:
        plugin = sink_plugin(item["type"])
        found = plugin.headline(item) if plugin is not None else None
        if found is not None:
            return found
    return None
