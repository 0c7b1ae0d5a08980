"""Issue 38, the Kafka sink's targets identified, not assumed: a topic re-created and refilled
by someone, one topic shared by two states, one broker spelled two ways, two schemas' tables of
one name, and ``verify`` of a topic that is gone. Every outcome is read back with an independent
consumer (confluent-kafka + fastavro) or the landing zone's own replay."""

from __future__ import annotations

import os
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from diffcdc.config import TableConfig
from diffcdc.core.changeset import OP_INSERT
from diffcdc.errors import TargetMismatch
from diffcdc.sinks.base import SinkHistory, SinkTable
from diffcdc.sinks.kafka import KafkaSink, KafkaSinkConfig
from diffcdc.sinks.targets import kafka_servers
from diffcdc.state.store import TableState
from tests.support.kafka_sink_parts import change_set, consume_all, make_row, new_sink, run_version
from tests.support.workspace import Workspace


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def recreate_topic(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes, list]]) -> None:
    """Delete ``topic``, create it again and write ``messages`` (key, value, headers) to it."""
    admin = _admin(bootstrap)
    admin.delete_topics([topic], request_timeout=10)[topic].result(10)
    admin.create_topics([NewTopic(topic, 1)], request_timeout=10)[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value, headers in messages:  # one batch each: Tansu's end offset counts batches
        producer.produce(topic, value, key=key, headers=headers, partition=0)
        assert producer.flush(10) == 0


def foreign(count: int) -> list[tuple[bytes | None, bytes, list]]:
    return [(None, f"someone else's message {i}".encode(), []) for i in range(count)]


def _workspace(root: str, broker: Any, topic: str, **sink: Any) -> Workspace:
    ws = Workspace(root, keys=("id",))
    ws.table = TableConfig(name="T", source=ws.source, keys=["id"], sinks=[
        {"type": "open_mirroring", "landing": ws.landing},
        {"type": "kafka", "bootstrap_servers": broker.bootstrap, "topic": topic,
         "timeout_seconds": 10, **sink},
    ])
    return ws


def _kafka_rows(ws: Workspace, spark: Any) -> list[tuple[Any, ...]]:
    sink = KafkaSink("kafka", SinkTable("T", ("id",)), ws.table.sinks[1])
    return sorted((r["id"], r["v"]) for r in sink.replay(spark).rows)


# --------------------------------------------------------------------------- case 1


@pytest.mark.integration
def test_a_topic_recreated_and_refilled_is_refused_alone_and_reload_sink_republishes(
        spark, broker, tmp_path):
    """The topic deleted, created again and refilled with 10 foreign messages (its end is past
    everything diffcdc published): the next version is refused for the Kafka sink alone, in one
    line naming the reload, again on the next run; the landing zone goes on; a reload of the
    sink gives the topic a full image that replays to the snapshot."""
    topic = f"refilled-{os.getpid()}"
    ws = _workspace(str(tmp_path), broker, topic)
    ws.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 31)])
    ws.run(spark)
    ws.write("2.parquet", [{"id": i, "v": f"b{i}"} for i in range(1, 31)])
    ws.run(spark)
    published = len(consume_all(KafkaSink("kafka", SinkTable("T", ("id",)), ws.table.sinks[1])))
    recreate_topic(broker.bootstrap, topic, foreign(published + 10))
    ws.write("3.parquet", [{"id": i, "v": f"c{i}"} for i in range(2, 33)])
    for _ in range(2):
        with pytest.raises(TargetMismatch) as refused:
            ws.run(spark)
        message = str(refused.value)
        assert "\n" not in message and f"topic {topic}" in message, message
        assert "Kafka sink kafka" in message and "table T" in message, message
        assert "diffcdc reload --table T --sink kafka --yes" in message, message
        assert refused.value.exit_code == 1
    ws.assert_mirror_equals(spark, "3.parquet")  # the other sink went on
    assert TableState(ws.state, "T").head().unpublished == ["kafka"]
    after = consume_all(KafkaSink("kafka", SinkTable("T", ("id",)), ws.table.sinks[1]))
    assert [m.value() for m in after] == [v for _, v, _ in foreign(published + 10)]  # nothing sent
    assert ws.run(spark, reload=True, reload_sinks=("kafka",)).outcome == "ok"
    assert _kafka_rows(ws, spark) == [(i, f"c{i}") for i in range(2, 33)]
    ws.write("4.parquet", [{"id": i, "v": f"d{i}"} for i in range(1, 5)])
    assert ws.run(spark).outcome == "ok"
    assert _kafka_rows(ws, spark) == [(i, f"d{i}") for i in range(1, 5)]


@pytest.mark.integration
def test_a_recreated_topic_holding_copies_of_the_sinks_own_messages_is_refused_by_its_id(
        spark, broker, tmp_path):
    """A topic re-created and filled with exact copies of what the sink published (a mirror of
    the old topic): the read-back finds the sink's own bytes, the topic id tells it apart."""
    sink = new_sink(broker)
    v1 = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 11)], initial=True)
    m1 = run_version(sink, v1, tmp_path)
    assert m1["topic_id"]
    copies = [(m.key(), m.value(), m.headers()) for m in consume_all(sink)]
    recreate_topic(broker.bootstrap, sink.config.topic, copies)
    with pytest.raises(TargetMismatch, match="was deleted and created again") as refused:
        new_sink(broker, topic=sink.config.topic).check(SinkHistory(((1, m1),)))
    assert "\n" not in str(refused.value)


@pytest.mark.integration
def test_a_message_of_the_version_with_other_bytes_at_the_recorded_offset_is_refused(
        spark, broker, tmp_path):
    """Someone else writes a message headed like the sink's last version (a look-alike with
    other content): refused, not taken for the sink's own."""
    sink = new_sink(broker)
    v1 = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 11)], initial=True)
    m1 = run_version(sink, v1, tmp_path)
    own = consume_all(sink)[0]
    recreate_topic(broker.bootstrap, sink.config.topic, [(own.key(), b"other bytes", own.headers())] * 3)
    check = new_sink(broker, topic=sink.config.topic)
    history = SinkHistory(((1, {**m1, "topic_id": None}),))  # as a broker without topic ids
    with pytest.raises(TargetMismatch, match="not the one this sink published"):
        check.check(history)


# --------------------------------------------------------------------------- case 2


@pytest.mark.integration
def test_a_second_state_on_the_same_topic_is_refused_and_the_first_goes_on(spark, broker, tmp_path):
    """Two configs, each with its own state root, name one topic: the second's full image is
    refused (exit 1, its landing zone still published), the first goes on publishing, and the
    topic holds only the first's messages."""
    topic = f"shared-{os.getpid()}"
    first = _workspace(str(tmp_path / "one"), broker, topic)
    second = _workspace(str(tmp_path / "two"), broker, topic)
    first.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 11)])
    assert first.run(spark).outcome == "ok"
    second.write("1.parquet", [{"id": i, "v": f"x{i}"} for i in range(1, 21)])
    for _ in range(2):  # and again in the next run (the version is committed for the landing zone)
        with pytest.raises(TargetMismatch) as refused:
            second.run(spark)
        message = str(refused.value)
        assert "\n" not in message and refused.value.exit_code == 1, message
        assert "already holds diffcdc messages of table T" in message, message
        assert "that this state did not publish" in message, message
        assert "give the sink a topic of its own" in message, message
    second.assert_mirror_equals(spark, "1.parquet")
    first.write("2.parquet", [{"id": i, "v": f"b{i}"} for i in range(1, 12)])
    assert first.run(spark).outcome == "ok"
    assert _kafka_rows(first, spark) == [(i, f"b{i}") for i in range(1, 12)]
    sink = KafkaSink("kafka", SinkTable("T", ("id",)), first.table.sinks[1])
    writers = {dict(m.headers())["diffcdc-writer"] for m in consume_all(sink)}
    assert len(writers) == 1  # nothing of the second state's


@pytest.mark.integration
def test_another_states_messages_after_the_sinks_own_are_refused(spark, broker, tmp_path):
    """Two states that both found the topic empty (their first checks raced): the next check
    of the one whose messages are no longer last is refused, not continued as its own."""
    sink = new_sink(broker)
    v1 = change_set(spark, sink.table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 6)], initial=True)
    m1 = run_version(sink, v1, tmp_path)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    headers = [("diffcdc-table", b"orders"), ("diffcdc-version", b"1"), ("diffcdc-part", b"1"),
               ("diffcdc-writer", b"another-state")]
    producer.produce(sink.config.topic, b"another state's full image", key=b"orders/1/1",
                     headers=headers, partition=0)
    assert producer.flush(10) == 0
    with pytest.raises(TargetMismatch, match="diffcdc messages another state published after"):
        new_sink(broker, topic=sink.config.topic).check(SinkHistory(((1, m1),)))


@pytest.mark.integration
def test_a_first_load_onto_a_topic_with_foreign_messages_is_refused_then_reload_takes_it(
        spark, broker, tmp_path):
    topic = f"foreign-{os.getpid()}"
    admin = _admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1)], request_timeout=10)[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"not diffcdc's", partition=0)
    producer.flush(10)
    ws = _workspace(str(tmp_path), broker, topic)
    ws.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 6)])
    with pytest.raises(TargetMismatch, match="already holds messages diffcdc did not publish"):
        ws.run(spark)
    # the operator decides the topic is the table's: a full image after what is there
    assert ws.run(spark, reload=True, reload_sinks=("kafka",)).outcome == "ok"
    assert _kafka_rows(ws, spark) == [(i, f"a{i}") for i in range(1, 6)]
    ws.write("2.parquet", [{"id": i, "v": f"b{i}"} for i in range(1, 6)])
    assert ws.run(spark).outcome == "ok"
    assert _kafka_rows(ws, spark) == [(i, f"b{i}") for i in range(1, 6)]


@pytest.mark.integration
def test_a_sink_removed_and_added_again_takes_its_own_topic_back(spark, broker, tmp_path):
    """The topic's last message is this state's own (the sink was removed from the config and
    added again): its full image is published, not refused."""
    topic = f"again-{os.getpid()}"
    ws = _workspace(str(tmp_path), broker, topic)
    ws.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 6)])
    ws.run(spark)
    kafka = ws.table.sinks[1]
    ws.table = ws.table.model_copy(update={"sinks": [ws.table.sinks[0]]})
    ws.write("2.parquet", [{"id": i, "v": f"b{i}"} for i in range(1, 6)])
    ws.run(spark)
    ws.table = ws.table.model_copy(update={"sinks": [ws.table.sinks[0], kafka]})
    ws.write("3.parquet", [{"id": i, "v": f"c{i}"} for i in range(1, 7)])
    assert ws.run(spark).outcome == "ok"
    assert _kafka_rows(ws, spark) == [(i, f"c{i}") for i in range(1, 7)]


# --------------------------------------------------------------------------- case 3


def test_one_broker_spelled_by_name_and_by_address_is_one_cluster(tmp_path):
    assert kafka_servers("127.0.0.1:19102") & kafka_servers("LocalHost:19102")
    assert kafka_servers("127.0.0.1") == kafka_servers("127.0.0.1:9092")  # the default port
    assert kafka_servers("PLAINTEXT://127.0.0.1:19102/") == kafka_servers("127.0.0.1:19102")
    assert kafka_servers("[::1]:9092") == kafka_servers("::1")
    assert not kafka_servers("127.0.0.1:19102") & kafka_servers("localhost:19103")
    with pytest.raises(ValueError, match="both use the Kafka topic 't' on 127.0.0.1:19102"):
        TableConfig.model_validate({"name": "A", "source": "s", "keys": ["id"], "sinks": [
            {"type": "kafka", "name": "one", "bootstrap_servers": "127.0.0.1:19102", "topic": "t"},
            {"type": "kafka", "name": "two", "bootstrap_servers": "localhost:19102", "topic": "t"},
        ]})


def test_two_tables_on_one_broker_spelled_two_ways_are_refused_at_load(tmp_path, capsys):
    from diffcdc.cli.main import main

    (tmp_path / "src").mkdir()
    config = tmp_path / "diffcdc.toml"
    sink = "[[tables.{t}.sinks]]\ntype = 'kafka'\nbootstrap_servers = '{s}'\ntopic = 'cdc'\n"
    config.write_text(
        "[tables.A]\nsource = 'src'\nkeys = ['id']\n" + sink.format(t="A", s="127.0.0.1:19102")
        + "[tables.B]\nsource = 'src'\nkeys = ['id']\n" + sink.format(t="B", s="localhost:19102"))
    assert main(["plan", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "table 'A' sink 'kafka' (topic) and table 'B' sink 'kafka' (topic)" in err, err


# --------------------------------------------------------------------------- case 4


def test_the_default_transactional_id_names_the_tables_schema(tmp_path):
    sinks = [{"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topic": "x"}]
    one = TableConfig(name="t", source="s", keys=["id"], schema_name="a", sinks=sinks)
    other = TableConfig(name="t", source="s", keys=["id"], schema_name="b",
                        sinks=[{**sinks[0], "topic": "y"}])
    plain = TableConfig(name="t", source="s", keys=["id"], sinks=[{**sinks[0], "topic": "z"}])
    from diffcdc.config import RunConfig

    RunConfig(tables=[one, other, plain])  # no clash: three ids of their own
    ids = [KafkaSink("kafka", t.sink_table(), t.sinks[0]).clients.transactional_id
           for t in (one, other, plain)]
    assert ids == ["diffcdc.a.t.kafka", "diffcdc.b.t.kafka", "diffcdc.t.kafka"]


@pytest.mark.integration
def test_a_sink_published_with_the_old_default_id_fences_it_once_and_goes_on(spark, broker, tmp_path):
    """A table with a schema whose state was published with the old default id (manifests
    without ``transactional_id``): its next version is staged with the new id and publishing it
    first fences the old one, so a run killed mid-transaction under the old id can never commit
    it; the version after that fences nothing."""
    table = SinkTable("t", ("id",), "a")
    config = KafkaSinkConfig(type="kafka", bootstrap_servers=broker.bootstrap,
                             topic=f"fence-{os.getpid()}", timeout_seconds=10)
    sink = KafkaSink("kafka", table, config)
    v1 = change_set(spark, table, 1, [(OP_INSERT, make_row(i)) for i in range(1, 6)], initial=True)
    m1 = run_version(sink, v1, tmp_path)
    old = {k: v for k, v in m1.items() if k not in ("transactional_id", "fences")}  # as staged before
    # a run killed mid-transaction under the old id (writing to another topic: Tansu shows a
    # read_committed reader no end offset of a partition with an open transaction)
    side = f"{config.topic}-side"
    admin = _admin(broker.bootstrap)
    admin.create_topics([NewTopic(side, 1)], request_timeout=10)[side].result(10)
    zombie = sink.clients.producer("diffcdc.t.kafka")
    zombie.init_transactions(10)
    zombie.begin_transaction()
    zombie.produce(side, b"zombie", partition=0)
    zombie.flush(10)

    staging = tmp_path / "v2"
    staging.mkdir()
    again = KafkaSink("kafka", table, config)
    history = SinkHistory(((1, old),))
    again.check(history)
    v2 = change_set(spark, table, 2, [(OP_INSERT, make_row(i)) for i in range(6, 9)])
    m2 = again.stage(v2, str(staging), history)
    assert m2["transactional_id"] == "diffcdc.a.t.kafka" and m2["fences"] == "diffcdc.t.kafka"
    again.publish(2, m2, str(staging), SinkHistory(((1, old), (2, m2))))
    with pytest.raises(KafkaException):  # fenced (Tansu does not answer it: a time-out)
        zombie.commit_transaction(5)
    staging3 = tmp_path / "v3"
    staging3.mkdir()
    history = SinkHistory(((1, old), (2, m2)))
    v3 = change_set(spark, table, 3, [(OP_INSERT, make_row(9))])
    m3 = again.stage(v3, str(staging3), history)
    assert m3["transactional_id"] == "diffcdc.a.t.kafka" and "fences" not in m3


# --------------------------------------------------------------------------- case 5


@pytest.mark.integration
def test_verify_of_a_topic_that_is_gone_names_the_sink_the_topic_and_the_reload(
        spark, broker, tmp_path):
    from diffcdc.engine.verify import verify_table

    topic = f"verify-gone-{os.getpid()}"
    ws = _workspace(str(tmp_path), broker, topic)
    ws.write("1.parquet", [{"id": i, "v": f"a{i}"} for i in range(1, 6)])
    ws.run(spark)
    admin = _admin(broker.bootstrap)
    admin.delete_topics([topic], request_timeout=10)[topic].result(10)
    with pytest.raises(TargetMismatch) as refused:
        verify_table(spark, ws.table, ws.state, os.path.join(ws.source, "1.parquet"), only="kafka")
    message = str(refused.value)
    assert "\n" not in message and "Unknown partition" not in message, message
    assert "Kafka sink kafka" in message and f"topic {topic} does not exist" in message, message
    assert "diffcdc reload --table T --sink kafka --yes" in message, message
