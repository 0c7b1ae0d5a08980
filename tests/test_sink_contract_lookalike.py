"""The sink contract's class "foreign look-alike target" (issue 38): a target deleted and made
again by someone else so that it looks like the sink's own where a cheap check looks — a Kafka
topic re-created and refilled past every offset diffcdc published, a landing table folder
re-created with files under the names diffcdc wrote (and its ``_metadata.json``), a Delta table
(current image or history) deleted and made again with one commit for each of its commits,
carrying diffcdc's commit info and application transactions and the same schema and
properties. The sink is refused alone, again on the next run, the table's other sink goes on,
and ``reload --sink`` gives the target a full image that replays.

The kind without a look-alike here: ``landing_dfs`` (the same check as ``landing_local``
through another byte store).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from diffcdc.engine.run import RunOptions, RunRequest, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import PublishConflict, TargetMismatch
from diffcdc.state.store import TableState
from tests.support.contract import assert_replays, companion, table_config, write_rows
from tests.support.sink_kinds import KINDS
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow


def _kafka_lookalike(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    """The topic deleted, created again and refilled (one batch per message) with ten foreign
    messages more than it held: its end offset passes everything diffcdc published."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = servers["kafka"].bootstrap
    topic = state.head().record.sinks[sink_id].manifest["topic"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lookalike",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    held = 0
    while True:
        message = consumer.poll(10)
        assert message is not None, "no end of partition"
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF
            break
        held += 1
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], request_timeout=10)[topic].result(10)
    admin.create_topics([NewTopic(topic, 1)], request_timeout=10)[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(held + 10):
        producer.produce(topic, f"look-alike {i}".encode(), partition=0)
        assert producer.flush(10) == 0


def _landing_lookalike(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    """The table folder deleted and made again by someone else: files under the names diffcdc
    published (other content) and the same ``_metadata.json``."""
    manifest = state.head().record.sinks[sink_id].manifest
    folder = os.path.join(manifest["landing"], manifest["landing_folder"])
    names = sorted(os.listdir(folder))
    with open(os.path.join(folder, "_metadata.json"), "rb") as handle:
        metadata = handle.read()
    shutil.rmtree(folder)
    os.makedirs(folder)
    for name in names:
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(metadata if name == "_metadata.json" else b"another publisher's " + name.encode())


def _delta_lookalike(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    """The Delta table deleted and made again by another writer that reproduces it: one commit
    for each commit it had, each with diffcdc's commit info (``diffcdc.*``) and application
    transactions copied, the same schema and table properties; its rows: the table's less one."""
    import json

    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    from diffcdc.sinks.delta.feed import plain_types

    path = state.head().record.sinks[sink_id].manifest["target"]
    table = DeltaTable(path)
    configuration = dict(table.metadata().configuration)
    rows = plain_types(table.to_pyarrow_table())
    commits = []
    for version in range(table.version() + 1):
        with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as log:
            actions = [json.loads(line) for line in log if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        commits.append(CommitProperties(
            custom_metadata={k: str(v) for k, v in info.items() if k.startswith("diffcdc.")},
            app_transactions=[Transaction(a["txn"]["appId"], int(a["txn"]["version"]))
                              for a in actions if "txn" in a]))
    shutil.rmtree(path)
    for n, props in enumerate(commits):
        write_deltalake(path, rows.slice(0, rows.num_rows - 1), mode="overwrite" if n else "error",
                        configuration=configuration if not n else None, commit_properties=props)
    copy = DeltaTable(path)
    assert copy.version() == table.version()
    assert [h.get("diffcdc.version") for h in copy.history()] == [
        h.get("diffcdc.version") for h in table.history()]
    for app in {t.app_id for p in commits for t in p.app_transactions or ()}:
        assert copy.transaction_version(app) == table.transaction_version(app)


LOOKALIKES = {"kafka": _kafka_lookalike, "landing_local": _landing_lookalike,
              "delta": _delta_lookalike, "history": _delta_lookalike}


@pytest.mark.parametrize("kind", [k for k in KINDS if k.name in LOOKALIKES], ids=lambda k: k.name)
def test_a_foreign_lookalike_target_is_refused_alone_and_reload_sink_replays_it(
        spark, servers, kind, tmp_path):
    root = str(tmp_path)
    other = companion(kind)
    table = table_config(root, [kind, other], servers)
    sink_id, other_id = (s.sink_id for s in table.sinks)
    state = os.path.join(root, "state")
    for n, (rows, tag) in enumerate([(12, "a"), (14, "b")], start=1):
        write_rows(root, f"{n}.parquet", rows, tag)
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    LOOKALIKES[kind.name](TableState(state, "T"), sink_id, servers)
    write_rows(root, "3.parquet", 13, "c")
    for _ in range(2):  # refused again by the next run: nothing resolves it silently
        with pytest.raises((TargetMismatch, PublishConflict), match=f"sink {sink_id}") as refused:
            run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
        assert "\n" not in str(refused.value)
        assert f"diffcdc reload --table T --sink {sink_id} --yes" in str(refused.value)
    assert TableState(state, "T").head().unpublished == [sink_id]
    results = verify_table(spark, table, state, os.path.join(table.source, "3.parquet"),
                           only=other_id)
    assert results[other_id].identical, results[other_id].to_dict()
    report = run_table(spark, table, state, RunOptions(
        quality=PERMISSIVE, request=RunRequest(reload=True, reload_sinks=(sink_id,))))
    assert report.outcome == "ok" and report.snapshots[0].sinks[other_id]["rows"] == 0
    assert_replays(spark, table, state, "3.parquet")
    write_rows(root, "4.parquet", 11, "d")
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    assert_replays(spark, table, state, "4.parquet")
