"""Kafka sink: Avro Object Container File messages with ``sys_op``, exactly once (spec §4)."""

from diffcdc.sinks.kafka.config import KafkaSinkConfig
from diffcdc.sinks.kafka.sink import KafkaSink

__all__ = ["KafkaSink", "KafkaSinkConfig"]
