"""The Kafka sink as the rest of diffcdc sees it (see :mod:`diffcdc.sinks.plugin`): its SASL
password checked before Spark starts, its Avro encoding run on the executors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diffcdc.extras import KAFKA
from diffcdc.sinks.kafka.config import KafkaSinkConfig
from diffcdc.sinks.plugin import Capabilities, SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.observe.naming import DatasetName
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


class KafkaPlugin(SinkPlugin):
    """The ``kafka`` sink type: Avro container files as messages, one transaction per version."""

    type = "kafka"
    config = KafkaSinkConfig
    extra = KAFKA
    capabilities = Capabilities(executor_modules=("diffcdc.sinks.kafka.stage",))

    @classmethod
    def build(cls, config: KafkaSinkConfig, table: SinkTable, state: TableState) -> Sink:
        from diffcdc.sinks.kafka.sink import KafkaSink  # the Kafka client loads only when used

        return KafkaSink(config.sink_id, table, config, state)

    @classmethod
    def check_secrets(cls, config: KafkaSinkConfig, table: str) -> None:
        if config.sasl_password_env:
            config.password(table)

    @classmethod
    def lineage_dataset(cls, config: KafkaSinkConfig, table: SinkTable) -> DatasetName | None:
        """The topic on the cluster named by its configured bootstrap servers (as written, not
        the addresses they resolve to: the name must not change with DNS or the machine)."""
        from diffcdc.observe.naming import kafka_dataset

        return kafka_dataset(config.bootstrap_servers.split(","), config.topic)
