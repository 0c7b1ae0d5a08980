"""The Kafka sink as the rest of diffcdc sees it (see :mod:`diffcdc.sinks.plugin`): its SASL
password checked before Spark starts, its Avro encoding run on the executors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffcdc.sinks.kafka.config import KafkaSinkConfig
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


def _build(config: KafkaSinkConfig, table: SinkTable, state: TableState) -> Sink:
    from diffcdc.sinks.kafka.sink import KafkaSink  # the Kafka client loads only when used

    return KafkaSink(config.sink_id, table, config, state)


def _check_secrets(config: KafkaSinkConfig, table: str) -> None:
    if config.sasl_password_env:
        config.password(table)


PLUGIN: SinkPlugin[KafkaSinkConfig] = SinkPlugin(
    type="kafka",
    config=KafkaSinkConfig,
    build=_build,
    executor_modules=("diffcdc.sinks.kafka.stage",),
    check_secrets=_check_secrets,
)
