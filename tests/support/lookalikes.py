"""Targets that look like a sink's own where a cheap check looks, made by another writer: a
Kafka topic re-created and refilled past every offset diffcdc published, a landing table folder
re-created under diffcdc's file names (with its ``_metadata.json``), a Delta table deleted and
made again commit for commit with diffcdc's commit info and application transactions. Each
takes (state, sink id, servers) and changes the sink's target behind its back."""

from __future__ import annotations

import os
import shutil
from typing import Any

from diffcdc.state.store import TableState


def kafka_lookalike(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
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


def landing_lookalike(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
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


def delta_lookalike(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
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


LOOKALIKES = {"kafka": kafka_lookalike, "landing_local": landing_lookalike,
              "delta": delta_lookalike, "history": delta_lookalike}
