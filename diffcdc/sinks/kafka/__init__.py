"""Kafka sink: Avro Object Container File messages with ``sys_op``, exactly once (spec §4).

The sink class loads on first use: loading a config (``diffcdc.sinks.kafka.config``) must not
import the Kafka client, numpy or PySpark (``diffcdc run`` with nothing pending stays fast).
"""

from __future__ import annotations

from typing import Any

from diffcdc.sinks.kafka.config import KafkaSinkConfig

__all__ = ["KafkaSink", "KafkaSinkConfig"]


def __getattr__(name: str) -> Any:
    if name == "KafkaSink":
        from diffcdc.sinks.kafka.sink import KafkaSink

        return KafkaSink
    raise AttributeError(name)
