"""The ``[[tables.NAME.sinks]]`` entry of a Kafka sink (``type = "kafka"``); see docs/kafka.md."""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from diffcdc.errors import ConfigError
from diffcdc.sinks.targets import SinkTarget, kafka_servers

#: Kafka's own rule for topic names.
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_AVRO_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: librdkafka settings that hold secrets: never in a config file (use sasl_password_env).
_SECRET_RE = re.compile(r"password|secret|jaas|\.pem$|^ssl\.key\.|oauthbearer\.config", re.I)
#: librdkafka settings the sink sets itself (exactly once depends on them).
_MANAGED = {
    "bootstrap.servers": "bootstrap_servers",
    "metadata.broker.list": "bootstrap_servers",
    "transactional.id": "transactional_id",
    "enable.idempotence": "(always true)",
    "acks": "(always all)",
    "request.required.acks": "(always all)",
    "isolation.level": "(always read_committed)",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "group.id": "(not used: the sink reads with assign())",
}
#: Bytes a message may take beyond its body (max_message_bytes): its key and headers (the
#: table name, version, part, snapshot id, checksum ...) and the record's framing.
MESSAGE_HEADROOM = 16_384
#: Prefixes of producer settings that concern the connection: the sink's consumer and admin
#: client get them too (a CA file, socket timeouts, ...).
CONNECTION_PREFIXES = ("ssl.", "sasl.", "socket.", "client.", "broker.", "reconnect.", "connections.")


class KafkaSinkConfig(BaseModel):
    """One Kafka topic receiving a table's changes as Avro container files (spec §4)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["kafka"] = Field(description="Sink type.")
    name: str | None = Field(default=None, description="Sink id within the table (default \"kafka\").")
    bootstrap_servers: str = Field(description="Brokers, `host:port[,host:port...]`.")
    topic: str = Field(description="Topic receiving the messages (created if missing).")
    mode: Literal["logical", "standalone"] = Field(
        default="logical",
        description="logical: upserts and deletes with a last `sys_op` field; standalone: inserts only.",
    )
    schema_name: str | None = Field(default=None, description="Avro record name (default: the table name).")
    max_records_per_message: int = Field(default=50_000, gt=0, description="Records per message at most.")
    max_message_bytes: int = Field(
        default=900_000,
        ge=4096,
        description="Bytes per message body at most (under the broker's default 1 MB message.max.bytes).",
    )
    partition: int = Field(default=0, ge=0, description="Partition of the topic receiving all of the table's messages.")
    partitions: int = Field(default=1, gt=0, description="Partitions of the topic when the sink creates it.")
    replication_factor: int = Field(
        default=-1, description="Replication factor when the sink creates the topic (-1: broker default)."
    )
    create_topic: bool = Field(default=True, description="Create the topic when it is missing (else refuse).")
    security_protocol: Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"] = Field(
        default="plaintext", description="Kafka security protocol."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism (with a sasl_* security protocol)."
    )
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password_env: str | None = Field(
        default=None, description="Name of the environment variable holding the SASL password."
    )
    transactional_id: str | None = Field(
        default=None, description="Producer transactional id (default `diffcdc.<schema>.<table>.<sink id>`, without `<schema>.` for a table without a schema)."
    )
    timeout_seconds: float = Field(
        default=30.0, gt=0, description="Bound on every broker operation (connect, produce, commit, read)."
    )
    producer: dict[str, str | int | bool] = Field(
        default_factory=dict, description="Extra librdkafka producer settings (no secrets)."
    )

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        if not _TOPIC_RE.match(value) or value in (".", ".."):
            raise ValueError(f"{value!r} is not a Kafka topic name ([A-Za-z0-9._-], 1 to 249 characters)")
        return value

    @field_validator("schema_name")
    @classmethod
    def _schema_name(cls, value: str | None) -> str | None:
        if value is not None and not _AVRO_NAME_RE.match(value):
            raise ValueError(f"{value!r} is not an Avro name ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    @field_validator("replication_factor")
    @classmethod
    def _replication(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError("replication_factor must be -1 (broker default) or at least 1")
        return value

    @field_validator("producer")
    @classmethod
    def _producer(cls, value: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        for key in value:
            if _SECRET_RE.search(key):
                raise ValueError(
                    f"producer setting {key!r} holds a secret: secrets never go in the config file "
                    "(put the SASL password in an environment variable named by sasl_password_env)"
                )
            if key in _MANAGED:
                raise ValueError(f"producer setting {key!r} is set by the sink: use {_MANAGED[key]}")
        return value

    @model_validator(mode="after")
    def _message_limit(self) -> KafkaSinkConfig:
        """A producer ``message.max.bytes`` must take the largest message the sink stages (the
        body and its key and headers), or every publish would fail after the commit."""
        if "message.max.bytes" not in self.producer:
            return self
        given = self.producer["message.max.bytes"]
        limit = int(given) if isinstance(given, (int, str)) and str(given).strip().isdigit() \
            and not isinstance(given, bool) else None
        if limit is None:
            raise ValueError(f"producer setting 'message.max.bytes' must be a number of bytes, "
                             f"not {given!r}")
        needed = self.max_message_bytes + MESSAGE_HEADROOM
        if limit < needed:
            raise ValueError(
                f"producer setting 'message.max.bytes' = {limit} is below max_message_bytes = "
                f"{self.max_message_bytes} plus {MESSAGE_HEADROOM} bytes for a message's key and "
                f"headers: every message up to max_message_bytes would be refused after the "
                f"commit; raise message.max.bytes to at least {needed}"
                + (f" or lower max_message_bytes to at most {limit - MESSAGE_HEADROOM}"
                   if limit - MESSAGE_HEADROOM >= 4096 else "")
            )
        return self

    @model_validator(mode="after")
    def _sasl(self) -> KafkaSinkConfig:
        sasl = self.security_protocol.startswith("sasl_")
        if sasl and not (self.sasl_mechanism and self.sasl_username and self.sasl_password_env):
            raise ValueError(
                f"security_protocol {self.security_protocol} needs sasl_mechanism, sasl_username "
                "and sasl_password_env"
            )
        if not sasl and (self.sasl_mechanism or self.sasl_username or self.sasl_password_env):
            raise ValueError("sasl_* settings need security_protocol sasl_plaintext or sasl_ssl")
        return self

    def password(self, table: str) -> str:
        """The SASL password from ``sasl_password_env`` (ConfigError, exit 2, when it is not
        set: found before Spark starts, see :mod:`diffcdc.sinks.kafka.plugin`)."""
        name = self.sasl_password_env or ""
        value = os.environ.get(name)
        if not value:
            raise ConfigError(
                f"environment variable {name} (sasl_password_env of Kafka sink {self.sink_id}) "
                "is not set",
                table=table,
                hint=f"export {name} with the SASL password before the run",
            )
        return value

    @property
    def sink_id(self) -> str:
        """The sink's id within its table."""
        return self.name or "kafka"

    def transactional_id_for(self, table: str, table_schema: str | None = None) -> str:
        """The producer's transactional id: ``transactional_id``, else
        ``diffcdc.<schema>.<table>.<sink>`` (``diffcdc.<table>.<sink>`` for a table without a
        schema): two schemas' tables of one name get ids of their own."""
        if self.transactional_id:
            return self.transactional_id
        if table_schema:
            return f"diffcdc.{table_schema}.{table}.{self.sink_id}"
        return f"diffcdc.{table}.{self.sink_id}"

    def legacy_transactional_id(self, table: str) -> str:
        """The id versions staged before manifests recorded theirs were published with (the
        default then left the table's schema out)."""
        return self.transactional_id or f"diffcdc.{table}.{self.sink_id}"

    def targets(self, table: str, schema_name: str | None = None) -> list[SinkTarget]:
        """The topic and the producer's transactional id, on the cluster of bootstrap_servers."""
        servers = kafka_servers(self.bootstrap_servers)
        txn = self.transactional_id_for(table, schema_name)
        default = "diffcdc.<schema>.<table>.<sink>" if schema_name else "diffcdc.<table>.<sink>"
        shown = repr(txn) if self.transactional_id else f"{txn!r} (the default: {default})"
        return [
            SinkTarget("topic", "topic", self.topic, repr(self.topic), servers),
            SinkTarget("txn", "transactional_id", txn, shown, servers),
        ]
