"""The Delta Lake sink as the rest of diffcdc sees it (see :mod:`diffcdc.sinks.plugin`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffcdc.extras import DELTA
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


class DeltaPlugin(SinkPlugin):
    """The ``delta`` sink type: a current image and a change feed, or a history (SCD2)."""

    type = "delta"
    config = DeltaSinkConfig
    extra = DELTA
    path_fields = ("path", "changelog_path")

    @classmethod
    def build(cls, config: DeltaSinkConfig, table: SinkTable, state: TableState) -> Sink:
        from diffcdc.sinks.delta.sink import DeltaSink  # delta-rs loads only when used

        return DeltaSink(config.sink_id, table, config)
