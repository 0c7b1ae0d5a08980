"""The Kafka sink's test parts shared by its test modules: a table schema with every kind of
column, its rows, change sets of them, a sink on a fresh topic of a real broker, what the
engine does for one version, and an independent reader of the topic."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql import types as T

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.sinks.base import ChangeSet, SinkHistory, SinkTable
from diffcdc.sinks.kafka import KafkaSink, KafkaSinkConfig
from tests.support.kafka_broker import TansuBroker

UTC = dt.timezone.utc

SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("name", T.StringType()),
        T.StructField("qty", T.IntegerType()),
        T.StructField("amount", T.DecimalType(12, 2)),
        T.StructField("score", T.DoubleType()),
        T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("ok", T.BooleanType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
    ]
)


def make_row(i: int, variant: int = 0) -> dict[str, Any]:
    """A row of SCHEMA; ``variant`` changes the non-key values."""
    return {
        "id": i,
        "name": None if i % 7 == 0 else f"name-{i}-{variant}" + "x" * (i % 90),
        "qty": (i * 31 + variant) % 1000 - 500,
        "amount": Decimal(i * 7 - 300 + variant) / 100,
        "score": None if i % 5 == 0 else i / 3 + variant,
        "day": dt.date(2020, 1, 1) + dt.timedelta(days=i % 900),
        "at": dt.datetime(2021, 2, 25, 16, 11, 14, tzinfo=UTC) + dt.timedelta(seconds=i * 37 + variant),
        "ok": None if i % 11 == 0 else bool((i + variant) % 2),
        "tags": None if i % 3 == 0 else [f"t{i}", "é"],
    }


def change_set(
    spark: Any,
    table: SinkTable,
    version: int,
    changes: list[tuple[int, dict[str, Any]]],
    *,
    initial: bool = False,
    recreate: str | None = None,
    schema: T.StructType = SCHEMA,
) -> ChangeSet:
    """A change set of ``(op, row)`` pairs; delete rows keep only the key."""
    full = T.StructType([*schema.fields, T.StructField(OP, T.IntegerType(), False)])
    keys = set(table.keys)
    rows = []
    for op, row in changes:
        values = {k: (v if op != OP_DELETE or k in keys else None) for k, v in row.items()}
        rows.append(tuple(values[f.name] for f in schema.fields) + (op,))
    count = {o: sum(1 for op, _ in changes if op == o) for o in (OP_INSERT, OP_UPDATE, OP_DELETE)}
    return ChangeSet(
        table=table,
        version=version,
        snapshot_id=f"snap-{version:03d}",
        schema=schema,
        frame=spark.createDataFrame(rows, full).repartition(2),
        initial=initial,
        inserted=count[OP_INSERT],
        updated=count[OP_UPDATE],
        deleted=count[OP_DELETE],
        recreate=recreate,
    )


_TOPICS = iter(range(10_000))


def new_sink(broker: TansuBroker, table: str = "orders", **options: Any) -> KafkaSink:
    options.setdefault("topic", f"cdc-{next(_TOPICS)}-{time.monotonic_ns()}")
    options.setdefault("timeout_seconds", 10)
    config = KafkaSinkConfig(type="kafka", bootstrap_servers=broker.bootstrap, **options)
    return KafkaSink("kafka", SinkTable(table, ("id",)), config)


def run_version(sink: KafkaSink, changes: ChangeSet, root: Any) -> dict[str, Any]:
    """What the engine does for one version: check, stage, (commit), publish."""
    staging = os.path.join(str(root), f"v{changes.version}")
    os.makedirs(staging)
    sink.check(SinkHistory())
    manifest = sink.stage(changes, staging, SinkHistory())
    json.dumps(manifest)  # the commit record keeps it
    sink.publish(changes.version, manifest, staging)
    return manifest


def consume_all(sink: KafkaSink, isolation: str = "read_committed") -> list[Any]:
    """Every message of the sink's partition, read independently of the sink."""
    c = sink.config
    consumer = Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": "test-reader",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(c.topic, c.partition, 0)])
    out = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return out
            out.append(msg)
        raise AssertionError("no end of partition")
    finally:
        consumer.close()
