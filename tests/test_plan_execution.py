"""The per-snapshot step carries out the plan: each decision and each target check once.

* counts per version of a steady run (a Delta, a Kafka and a landing sink on one table): each
  sink's target is checked quickly before the diff, in full right before the commit, and once
  more right before it writes (without a Delta table's file listing: other writers may have
  come since the commit's check), a Delta table's files are listed once, Kafka's ``accept``
  runs once, and the state log is listed a bounded number of times;
* a target changed between the commit and the publish is refused by the publish's own check:
  the version stays committed, the target holds what the other writer left;
* a target changed between the stage and the commit (Delta, Kafka) is refused by the check
  right before the commit: nothing is committed, nothing published, and the target holds
  exactly what the other writer left.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from diffcdc.engine.run import RunOptions, run_table
from diffcdc.errors import PublishConflict, TargetMismatch
from diffcdc.state.store import TableState
from tests.support.contract import table_config, write_rows
from tests.support.sink_kinds import KINDS, SinkKind
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow

DELTA, KAFKA, LANDING = (next(k for k in KINDS if k.name == n)
                         for n in ("delta", "kafka", "landing_local"))


def _count(monkeypatch: pytest.MonkeyPatch, calls: Counter, owner: Any, name: str,
           label: str) -> None:
    """Count every call of ``owner.name`` under ``label`` (the call itself goes on)."""
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[label] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


def _counters(monkeypatch: pytest.MonkeyPatch) -> Counter:
    from deltalake import DeltaTable

    from diffcdc.sinks.delta.sink import DeltaSink
    from diffcdc.sinks.delta.target_check import DeltaTarget
    from diffcdc.sinks.kafka.sink import KafkaSink
    from diffcdc.sinks.openmirroring import publish as landing_publish
    from diffcdc.sinks.openmirroring import sink as landing_sink

    calls: Counter = Counter()
    _count(monkeypatch, calls, DeltaTarget, "verify", "delta check")
    _count(monkeypatch, calls, DeltaSink, "quick_check", "delta quick check")
    _count(monkeypatch, calls, DeltaTable, "repair", "delta file listing")
    _count(monkeypatch, calls, KafkaSink, "_verify", "kafka check")
    _count(monkeypatch, calls, KafkaSink, "accept", "kafka accept")
    _count(monkeypatch, calls, landing_sink, "check_continuation", "landing check")
    _count(monkeypatch, calls, landing_publish, "check_continuation", "landing check")
    _count(monkeypatch, calls, TableState, "commits", "state log listing")
    return calls


def test_a_steady_version_checks_each_target_once(spark, servers, tmp_path, monkeypatch):
    """One new snapshot, three sinks: per sink a quick check before the diff and a full one
    before the commit, none when publishing; one listing of the Delta table's files, one
    ``accept`` per sink; the state log is listed a few times."""
    root = str(tmp_path)
    table = table_config(root, [DELTA, KAFKA, LANDING], servers)
    state = os.path.join(root, "state")
    for n, (rows, tag) in enumerate([(12, "a"), (14, "b")], start=1):
        write_rows(root, f"{n}.parquet", rows, tag)
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    write_rows(root, "3.parquet", 13, "c")
    calls = _counters(monkeypatch)
    report = run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    assert report.outcome == "ok" and [s.version for s in report.snapshots] == [3]
    print(dict(calls))
    # quick before the diff, in full before the commit, the log again right before the write
    assert calls["delta check"] == 3 and calls["delta quick check"] == 1
    assert calls["delta file listing"] == 1
    assert calls["kafka check"] == 3
    assert calls["kafka accept"] == 1
    assert calls["landing check"] == 3
    assert calls["state log listing"] <= 4


def _delta_version(state: TableState, sink_id: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(state.head().record.sinks[sink_id].manifest["target"]).version()


def _kafka_end(state: TableState, sink_id: str, servers: dict[str, Any]) -> int:
    from confluent_kafka import Consumer, TopicPartition

    topic = state.head().record.sinks[sink_id].manifest["topic"]
    consumer = Consumer({"bootstrap.servers": servers["kafka"].bootstrap, "group.id": "count",
                         "isolation.level": "read_committed"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def _landing_files(state: TableState, sink_id: str, servers: dict[str, Any]) -> list[str]:
    manifest = state.head().record.sinks[sink_id].manifest
    return sorted(os.listdir(os.path.join(manifest["landing"], manifest["landing_folder"])))


TargetNow = Callable[[TableState, str, dict[str, Any]], Any]


def _run_with_target_changed_at(point: str, spark, servers, tmp_path, monkeypatch,
                                 kind: SinkKind, target_now: TargetNow) -> tuple[TableState, str, Any]:
    """Two versions published, then a third run whose target another writer changes at
    ``point``; the run must be refused for the sink. Returns the table's state, the sink and
    what the target held right after the other writer's change."""
    from diffcdc.engine import snapshot

    root = str(tmp_path)
    table = table_config(root, [kind], servers)
    sink_id = table.sinks[0].sink_id
    state = os.path.join(root, "state")
    for n, (rows, tag) in enumerate([(12, "a"), (14, "b")], start=1):
        write_rows(root, f"{n}.parquet", rows, tag)
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    write_rows(root, "3.parquet", 13, "c")
    tstate = TableState(state, "T")
    seen: dict[str, Any] = {}
    crash_point = snapshot.crash_point

    def changed_at(name: str, *args: Any, **kwargs: Any) -> None:
        if name == point:
            assert kind.tamper is not None
            kind.tamper(tstate, sink_id, servers, "foreign")
            seen["target"] = target_now(tstate, sink_id, servers)
        crash_point(name, *args, **kwargs)

    monkeypatch.setattr(snapshot, "crash_point", changed_at)
    with pytest.raises((TargetMismatch, PublishConflict), match=f"sink {sink_id}"):
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    assert "target" in seen  # the target was changed at that point
    return tstate, sink_id, seen["target"]


@pytest.mark.parametrize(("kind", "target_now"), [
    (DELTA, lambda state, sink, servers: _delta_version(state, sink)),
    (KAFKA, _kafka_end),
], ids=["delta", "kafka"])
def test_a_target_changed_between_stage_and_commit_is_refused_before_anything_is_published(
        spark, servers, tmp_path, monkeypatch, kind: SinkKind, target_now: TargetNow):
    """Another writer changes the target while the version is being staged: the check right
    before the commit refuses it, the version is not committed and the target holds only what
    the other writer left (nothing of the version)."""
    tstate, sink_id, left = _run_with_target_changed_at(
        "after_changes_staged", spark, servers, tmp_path, monkeypatch, kind, target_now)
    head = tstate.head()
    assert head.version == 2 and head.published  # nothing committed
    assert target_now(tstate, sink_id, servers) == left  # nothing published


@pytest.mark.parametrize(("kind", "target_now"), [
    (DELTA, lambda state, sink, servers: _delta_version(state, sink)),
    (KAFKA, _kafka_end),
    (LANDING, _landing_files),
], ids=["delta", "kafka", "landing"])
def test_a_target_changed_between_the_commit_and_the_publish_is_not_published_over(
        spark, servers, tmp_path, monkeypatch, kind: SinkKind, target_now: TargetNow):
    """Another writer changes the target after the check before the commit (while the state
    is hashed, or an earlier sink publishes): the sink's publish checks again and refuses; the
    version stays committed for the sink's later publish and the target holds only what the
    other writer left."""
    tstate, sink_id, left = _run_with_target_changed_at(
        "after_claim", spark, servers, tmp_path, monkeypatch, kind, target_now)
    head = tstate.head()
    assert head.version == 3 and sink_id in head.unpublished  # committed, not published
    assert target_now(tstate, sink_id, servers) == left  # nothing published over it
