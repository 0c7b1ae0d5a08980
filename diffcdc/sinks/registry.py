"""Sinks by type: from a sink's config to the sink object a run uses."""

from __future__ import annotations

from diffcdc.config import SinkConfig
from diffcdc.errors import ConfigError
from diffcdc.sinks.base import Sink, SinkTable
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.kafka.config import KafkaSinkConfig
from diffcdc.sinks.openmirroring.config import OpenMirroringSinkConfig
from diffcdc.sinks.openmirroring.sink import OpenMirroringSink
from diffcdc.state.store import TableState


def build_sink(config: SinkConfig, table: SinkTable, state: TableState) -> Sink:
    """The sink object for one configured sink of a table."""
    if isinstance(config, OpenMirroringSinkConfig):
        return OpenMirroringSink(config.sink_id, table, config, state.sink_marks(config.sink_id))
    if isinstance(config, DeltaSinkConfig):
        from diffcdc.sinks.delta.sink import DeltaSink  # delta-rs loads only when used

        return DeltaSink(config.sink_id, table, config)
    if isinstance(config, KafkaSinkConfig):
        from diffcdc.sinks.kafka.sink import KafkaSink  # the Kafka client loads only when used

        return KafkaSink(config.sink_id, table, config)
    raise ConfigError(f"unknown sink type {getattr(config, 'type', config)!r}", table=table.name)
