"""librdkafka clients of one Kafka sink: settings, the topic, reading a partition to its end.

Every broker operation is bounded by ``timeout_seconds``; a broker that does not answer
becomes :class:`~diffcdc.sinks.kafka.errors.KafkaUnavailable` (exit 1, the next run retries),
never a hang. librdkafka's own log lines go to the ``diffcdc.kafka.librdkafka`` logger (not to
stderr). The SASL password is read from its environment variable when a client is built and
is never logged, stored or shown by :meth:`KafkaClients.describe`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from diffcdc.errors import ConfigError, DiffcdcError, TargetMismatch
from diffcdc.sinks.kafka.config import CONNECTION_PREFIXES, KafkaSinkConfig
from diffcdc.sinks.kafka.errors import KafkaPublishError, KafkaUnavailable

LOG = logging.getLogger("diffcdc.kafka.librdkafka")
LOG.addHandler(logging.NullHandler())  # quiet unless the application configures logging

_UNAVAILABLE = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.BROKER_NOT_AVAILABLE,
}


#: Errors of a topic description that mean "no topic id here" (an older broker, no such topic).
_NO_TOPIC_ID = {
    KafkaError._UNSUPPORTED_FEATURE,
    KafkaError.UNSUPPORTED_VERSION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}


#: Errors meaning the topic or its partition does not exist.
_NO_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}


class KafkaClients:
    """Builds the producer, consumer and admin client of one sink and translates their errors."""

    def __init__(
        self, config: KafkaSinkConfig, table: str, sink_id: str, table_schema: str | None = None
    ) -> None:
        self.config = config
        self.table = table
        self.sink_id = sink_id
        self.timeout = float(config.timeout_seconds)
        #: The id new versions are published with (manifests record it: a version is always
        #: published with the id it was staged with, see :mod:`diffcdc.sinks.kafka.publish`).
        self.transactional_id = config.transactional_id_for(table, table_schema)
        #: The id of versions staged before manifests recorded theirs.
        self.legacy_transactional_id = config.legacy_transactional_id(table)
        #: The way out named when the topic or partition is missing (the sink sets its reload
        #: command here).
        self.gone_hint = "check the sink's topic and partition"

    @property
    def target(self) -> str:
        """``<bootstrap servers>/<topic>`` (no credentials)."""
        return f"{self.config.bootstrap_servers}/{self.config.topic}"

    def _common(self) -> dict[str, Any]:
        c = self.config
        conf: dict[str, Any] = {
            "bootstrap.servers": c.bootstrap_servers,
            "security.protocol": c.security_protocol,
            "logger": LOG,
            "socket.connection.setup.timeout.ms": int(self.timeout * 1000),
        }
        if c.sasl_mechanism:
            conf["sasl.mechanism"] = c.sasl_mechanism
            conf["sasl.username"] = c.sasl_username
            conf["sasl.password"] = c.password(self.table)
        conf.update({k: v for k, v in c.producer.items() if k.startswith(CONNECTION_PREFIXES)})
        return conf

    def producer(self, transactional_id: str | None = None) -> Producer:
        """A transactional, idempotent producer with ``transactional_id`` (default: the sink's
        stable transactional id)."""
        c = self.config
        ms = int(self.timeout * 1000)
        conf = {
            **self._common(),
            "transactional.id": transactional_id or self.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": max(1_000_000, c.max_message_bytes + 65_536),
            "message.timeout.ms": ms,
            "transaction.timeout.ms": max(60_000, 2 * ms),
            "linger.ms": 5,
        }
        conf.update(c.producer)
        return self._build(Producer, conf, "connecting the producer")

    def consumer(self) -> Consumer:
        """A ``read_committed`` consumer for ``assign()`` (no group membership, no commits)."""
        conf = {
            **self._common(),
            "group.id": f"diffcdc.{self.table}.{self.sink_id}.reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": max(52_428_800, 2 * self.config.max_message_bytes),
            "max.partition.fetch.bytes": max(1_048_576, 2 * self.config.max_message_bytes),
        }
        return self._build(Consumer, conf, "connecting the consumer")

    def _build(self, cls: Any, conf: dict[str, Any], doing: str) -> Any:
        try:
            return cls(conf)
        except KafkaException as exc:
            raise ConfigError(
                f"Kafka sink {self.sink_id}: {doing}: invalid client settings: {exc.args[0]}",
                table=self.table,
                hint="fix the sink's producer settings",
            ) from None

    def error(self, exc: BaseException, doing: str) -> DiffcdcError:
        """A one-line diffcdc error for a failed broker operation."""
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        text = err.str() if err is not None else str(exc)
        where = f"Kafka sink {self.sink_id} ({self.target}): {doing} failed: {text}"
        if err is not None and err.code() in _NO_TOPIC:
            return TargetMismatch(
                f"Kafka sink {self.sink_id} ({self.target}): {doing} failed: topic "
                f"{self.config.topic} has no partition {self.config.partition} (the topic is gone)",
                table=self.table,
                hint=self.gone_hint,
            )
        if err is None or err.code() in _UNAVAILABLE or err.retriable():
            return KafkaUnavailable(
                where,
                table=self.table,
                hint="check that the broker is up and reachable (bootstrap_servers, network, "
                "timeout_seconds); the next run publishes what is missing",
            )
        return KafkaPublishError(
            where, table=self.table, hint="fix the broker side (ACLs, topic, settings), then run again"
        )

    def ensure_topic(self, create: bool = True) -> int | None:
        """Make sure the topic exists (creating it when allowed); return its partition count.

        With ``create`` False a missing topic is None: it is never created (a topic that held
        what diffcdc published must not silently come back empty).
        """
        c = self.config
        admin = AdminClient({k: v for k, v in self._common().items()})
        try:
            # All topics: a metadata request naming one topic auto-creates it on some brokers.
            topics = admin.list_topics(timeout=self.timeout).topics
            if c.topic not in topics or topics[c.topic].error is not None:
                if not create:
                    return None
                if not c.create_topic:
                    raise KafkaPublishError(
                        f"Kafka sink {self.sink_id}: topic {c.topic} does not exist on {c.bootstrap_servers}",
                        table=self.table,
                        hint="create the topic, or set create_topic = true",
                    )
                new = NewTopic(c.topic, num_partitions=c.partitions, replication_factor=c.replication_factor)
                future = admin.create_topics([new], request_timeout=self.timeout)[c.topic]
                try:
                    future.result(timeout=self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                deadline = time.monotonic() + self.timeout
                while c.topic not in topics or not topics[c.topic].partitions:
                    if time.monotonic() > deadline:
                        raise KafkaUnavailable(
                            f"Kafka sink {self.sink_id}: topic {c.topic} was created but does not show up",
                            table=self.table,
                            hint="check the broker, then run again",
                        )
                    time.sleep(0.1)
                    topics = admin.list_topics(timeout=self.timeout).topics
        except KafkaException as exc:
            raise self.error(exc, f"checking topic {c.topic}") from None
        count = len(topics[c.topic].partitions)
        if c.partition >= count:
            raise KafkaPublishError(
                f"Kafka sink {self.sink_id}: topic {c.topic} has {count} partition(s), the sink "
                f"writes to partition {c.partition}",
                table=self.table,
                hint="set partition below the topic's partition count, or add partitions to the topic",
            )
        return count

    def topic_id(self) -> str | None:
        """The topic's id: a UUID the broker gives a topic when it is created (Kafka 2.8 on), so
        a topic deleted and created again under the same name has another. None when the
        broker does not give one (an older broker, or the topic is missing)."""
        admin = AdminClient(self._common())
        topic = self.config.topic
        try:
            found = admin.describe_topics(TopicCollection([topic]), request_timeout=self.timeout)
            described = found[topic].result(timeout=self.timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if err is not None and err.code() in _NO_TOPIC_ID:
                return None
            raise self.error(exc, f"describing topic {topic}") from None
        text = str(described.topic_id) if getattr(described, "topic_id", None) is not None else ""
        return None if not text or text.strip("A=") == "" else text

    def watermarks(self) -> tuple[int, int]:
        """The partition's first offset and its end (``read_committed``)."""
        consumer = self.consumer()
        try:
            tp = TopicPartition(self.config.topic, self.config.partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=self.timeout)
            return int(low), int(high)
        except KafkaException as exc:
            raise self.error(exc, "reading the partition's offsets") from None
        finally:
            consumer.close()

    def last_message(self) -> Message | None:
        """The partition's last committed message (None: it holds none), reading only a tail
        of it (widened until a message is found: the last offsets may be transaction markers)."""
        low, high = self.watermarks()
        window = 64
        while True:
            start = max(low, high - window)
            last = None
            for message in self.read_partition(start):
                last = message
            if last is not None or start <= low:
                return last
            window *= 8

    def end_offset(self) -> int:
        """The partition's end as a ``read_committed`` reader sees it (the last stable offset)."""
        consumer = self.consumer()
        try:
            tp = TopicPartition(self.config.topic, self.config.partition)
            return int(consumer.get_watermark_offsets(tp, timeout=self.timeout)[1])
        except KafkaException as exc:
            raise self.error(exc, "reading the partition's end offset") from None
        finally:
            consumer.close()

    def read_partition(self, start: int | None = None) -> Iterator[Message]:
        """Every committed message of the sink's partition from ``start`` (None: the beginning)."""
        c = self.config
        consumer = self.consumer()
        try:
            tp = TopicPartition(c.topic, c.partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=self.timeout)
            begin = low if start is None or start > high else max(start, low)  # > high: re-created
            if begin >= high:
                return
            consumer.assign([TopicPartition(c.topic, c.partition, begin)])
            deadline = time.monotonic() + self.timeout
            while True:
                batch = consumer.consume(num_messages=256, timeout=0.5)
                if not batch:
                    if time.monotonic() > deadline:
                        raise KafkaUnavailable(
                            f"Kafka sink {self.sink_id} ({self.target}): reading partition "
                            f"{c.partition} did not reach its end in {self.timeout:g} s",
                            table=self.table,
                            hint="check the broker (or raise timeout_seconds), then run again",
                        )
                    continue
                deadline = time.monotonic() + self.timeout
                for message in batch:
                    err = message.error()
                    if err is None:
                        yield message
                    elif err.code() == KafkaError._PARTITION_EOF:
                        return
                    else:
                        raise self.error(KafkaException(err), f"reading partition {c.partition}")
        except KafkaException as exc:
            raise self.error(exc, f"reading partition {c.partition}") from None
        finally:
            consumer.close()


def header_map(message: Message) -> dict[str, str]:
    """A message's headers as text (the last value of a repeated name wins)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in (message.headers() or [])}
