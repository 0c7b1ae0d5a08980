"""The Delta Lake sink as the rest of diffcdc sees it (see :mod:`diffcdc.sinks.plugin`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


def _build(config: DeltaSinkConfig, table: SinkTable, state: TableState) -> Sink:
    from diffcdc.sinks.delta.sink import DeltaSink  # delta-rs loads only when used

    return DeltaSink(config.sink_id, table, config)


PLUGIN: SinkPlugin[DeltaSinkConfig] = SinkPlugin(
    type="delta",
    config=DeltaSinkConfig,
    build=_build,
    path_fields=("path", "changelog_path"),
)
