"""The engine with in-memory sinks told to fail (tests/support/memory_sink.py): what is
committed, published, skipped and caught up per sink when one fails at a given step.

* replaying a memory sink's output gives every snapshot (and ``verify`` says so);
* a sink failing to publish (transient or terminal) neither blocks nor duplicates the table's
  other sink (a memory sink or a landing zone); later snapshots are still committed; once it
  works again it publishes what it missed, oldest first, each version once;
* a sink whose target check fails before the commit still gets the version staged, and
  catches up; when no sink can take a version, it is not committed;
* a change set refused at ``accept`` or a failure at ``stage`` commits nothing for any sink
  (a failure at ``prepare`` fails that sink alone: tests/test_edges_disk_engine.py);
* the run's error: the failed sink's own (transient or not), exit code 1 (3 for a change set
  refused at ``accept``), naming the sink and the sinks that published.

The first two tests check the memory sink itself (no Spark: the unit tier).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.engine.context import RunOptions
from diffcdc.engine.run import run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import DiffcdcError, InputRefused, TargetMismatch, TransientStorageError
from diffcdc.state.store import TableState
from tests.support.memory_sink import MemoryTarget
from tests.support.sink_kinds import KINDS
from tests.support.workspace import PERMISSIVE

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
LANDING = next(k for k in KINDS if k.name == "landing_local")


def rows(*items: tuple[int, str | None, float | None]) -> list[dict]:
    return [{"id": i, "name": n, "score": s} for i, n, s in items]


#: Inserts; then updates, a delete, an insert and a key change (3 → 30); then deletes, a NULL
#: and a re-insert of a deleted key.
SNAPSHOTS = [
    rows((1, "a", 1.0), (2, "b", 2.0), (3, "c", None), (4, "d", 4.0)),
    rows((1, "a", 1.5), (2, "B", 2.0), (30, "c", None), (5, "e", 5.0)),
    rows((1, None, 1.5), (30, "c", None), (4, "d", 4.0)),
]


class Table:
    """A table in a temp dir whose sinks are memory targets and/or real sink entries."""

    def __init__(self, memory_sinks, root, sinks: list) -> None:
        self.root = str(root)
        self.source = os.path.join(self.root, "source")
        self.state = os.path.join(self.root, "state")
        os.makedirs(self.source)
        self.config = memory_sinks.table("T", self.source, ["id"], sinks)
        self.written = 0

    def write(self, i: int) -> str:
        """Snapshot ``i`` of :data:`SNAPSHOTS` as the next file of the source."""
        self.written += 1
        name = f"{self.written}.parquet"
        pq.write_table(pa.Table.from_pylist(SNAPSHOTS[i], SCHEMA), os.path.join(self.source, name))
        return name

    def run(self, spark):
        return run_table(spark, self.config, self.state, RunOptions(quality=PERMISSIVE))

    def fails(self, spark, error: type[Exception] = DiffcdcError) -> DiffcdcError:
        with pytest.raises(error) as caught:
            self.run(spark)
        return caught.value

    def head(self) -> int | None:
        head = TableState(self.state, "T").head()
        return head.version if head is not None else None

    def published(self, version: int) -> set[str]:
        (commit,) = [c for c in TableState(self.state, "T").commits() if c.version == version]
        return set(commit.published_sinks)

    def verify(self, spark, snapshot: str) -> dict:
        results = verify_table(spark, self.config, self.state, os.path.join(self.source, snapshot))
        return {sink: r.identical for sink, r in results.items()}


def image(i: int) -> list[dict]:
    return sorted(SNAPSHOTS[i], key=lambda r: r["id"])


def held(target) -> list[dict]:
    return sorted(target.image(), key=lambda r: r["id"])


def test_a_fault_fires_at_its_step_and_version_as_often_as_told():
    target = MemoryTarget("m")
    target.fail_at("publish", version=2, kind="transient", times=2)
    target.fail_at("stage", kind="terminal")
    target.fail_at("accept", version=1, kind="terminal", times=1)
    target.fail_at("check", version=3, kind="unexpected", times=1)
    target.step("m", "publish", 1)
    for _ in range(2):
        with pytest.raises(TransientStorageError) as caught:
            target.step("m", "publish", 2)
        assert caught.value.transient and "publish of version 2" in caught.value.message
    target.step("m", "publish", 2)  # twice was all
    for version in (1, 5):
        with pytest.raises(TargetMismatch):
            target.step("m", "stage", version)  # any version, until healed
    with pytest.raises(InputRefused):
        target.step("m", "accept", 1)
    with pytest.raises(RuntimeError):
        target.step("m", "check", 3)
    target.heal()
    target.step("m", "stage", 6)
    assert target.calls_at("publish") == [1, 2, 2, 2]
    assert target.calls_at("stage") == [1, 5, 6]


def test_the_memory_target_refuses_what_a_real_target_would_show_as_a_mistake():
    target = MemoryTarget("m")
    keys, columns = ("id",), ["id", "v"]

    def change(op: int, i: int, v: str | None = None) -> dict:
        return {"id": i, "v": v, "__diffcdc_op": op}

    target.apply(1, True, keys, columns, [change(1, 1, "a"), change(1, 2, "b")], None)
    target.apply(2, False, keys, columns, [change(2, 1, "A"), change(3, 2)], 1)
    assert target.image() == [{"id": 1, "v": "A"}] and target.versions == [1, 2]
    mistakes = [
        (4, [change(1, 3, "c")], 3),  # a gap: version 3 never arrived
        (3, [change(1, 1, "again")], 2),  # an insert of a held key
        (3, [change(2, 7, "x")], 2),  # an update of a missing key
        (3, [change(3, 2)], 2),  # a delete of a missing key
    ]
    for version, changes, previous in mistakes:
        with pytest.raises(TargetMismatch):
            target.apply(version, False, keys, columns, changes, previous)
    assert len(target.violations) == 4
    with pytest.raises(AssertionError):
        target.assert_once_in_order()


@pytest.mark.default_tier
def test_replaying_the_memory_sink_gives_every_snapshot(spark, memory_sinks, tmp_path):
    mem = memory_sinks.add("mem")
    table = Table(memory_sinks, tmp_path, [mem])
    for i in range(len(SNAPSHOTS)):
        sid = table.write(i)
        (result,) = table.run(spark).snapshots
        assert held(mem) == image(i)
        assert mem.versions == list(range(1, i + 2))
        ops = [c["__diffcdc_op"] for c in mem.published[-1].changes]
        assert (ops.count(1), ops.count(2), ops.count(3)) == (
            result.inserted, result.updated, result.deleted)
        assert table.verify(spark, sid) == {"mem": True}
    assert [p.initial for p in mem.published] == [True, False, False]
    assert (table.run(spark).outcome, mem.versions) == ("nothing to do", [1, 2, 3])
    mem.assert_once_in_order()


@pytest.mark.parametrize("kind, other", [
    pytest.param("transient", "memory", marks=pytest.mark.default_tier),
    ("terminal", "landing"),
])
def test_a_sink_failing_to_publish_neither_blocks_nor_duplicates_the_other_and_catches_up(
        spark, memory_sinks, tmp_path, kind, other):
    failing = memory_sinks.add("a")
    if other == "memory":
        b = memory_sinks.add("b")
        sinks = [failing, b]
    else:
        sinks = [failing, LANDING.entry(str(tmp_path / "out"), {})]
    table = Table(memory_sinks, tmp_path / "t", sinks)
    other_id = table.config.sinks[1].sink_id
    table.write(0)
    table.run(spark)

    # Version 2: the failing sink cannot publish it; the other sink does.
    failing.fail_at("publish", version=2, kind=kind)
    second = table.write(1)
    error = table.fails(spark, TransientStorageError if kind == "transient" else TargetMismatch)
    assert error.transient == (kind == "transient")
    assert error.report.exit_code == 1 and error.report.error["error"] == type(error).__name__
    assert error.message.startswith("sink a: injected")
    assert f"sink(s) {other_id} published what was committed" in error.message
    assert table.head() == 2 and table.published(2) == {other_id}
    assert failing.versions == [1] and held(failing) == image(0)
    assert table.verify(spark, second)[other_id]

    # Version 3 is committed while the sink is still down: it stops at version 2 again.
    third = table.write(2)
    table.fails(spark)
    assert table.head() == 3 and table.published(3) == {other_id}
    assert failing.calls_at("publish") == [1, 2, 2] and failing.versions == [1]
    assert table.verify(spark, third)[other_id]

    # Still down, nothing new: it tries version 2 only, never 3 before 2.
    assert table.fails(spark).message.startswith("sink a: injected")
    assert failing.calls_at("publish") == [1, 2, 2, 2] and failing.versions == [1]

    # Healed: it publishes 2, then 3; the other sink publishes nothing again.
    failing.heal()
    report = table.run(spark)
    assert (report.outcome, report.resumed_versions, report.snapshots) == ("ok", [2, 3], [])
    assert failing.versions == [1, 2, 3] and held(failing) == image(2)
    assert table.published(2) == table.published(3) == {"a", other_id}
    assert table.verify(spark, third) == {"a": True, other_id: True}
    failing.assert_once_in_order()
    if other == "memory":
        assert b.calls_at("publish") == [1, 2, 3]
        b.assert_once_in_order()
    else:
        LANDING.assert_once(TableState(table.state, "T"), other_id, {})
    assert table.run(spark).outcome == "nothing to do"


@pytest.mark.default_tier
def test_when_no_sink_can_take_a_version_it_is_not_committed(spark, memory_sinks, tmp_path):
    a, b = memory_sinks.add("a"), memory_sinks.add("b")
    table = Table(memory_sinks, tmp_path, [a, b])
    table.write(0)
    table.run(spark)
    a.fail_at("check", kind="terminal")
    b.fail_at("check", kind="transient")
    table.write(1)
    error = table.fails(spark)
    assert "sinks a, b failed" in error.message and error.report.exit_code == 1
    assert table.head() == 1
    assert (a.calls_at("stage"), b.calls_at("stage")) == ([1], [1])  # nothing staged for 2
    versions = TableState(table.state, "T").versions_dir
    assert not [n for n in os.listdir(versions) if n.startswith(f"{2:020d}")]  # removed again
    assert a.versions == b.versions == [1]

    a.heal()
    b.heal()
    (result,) = table.run(spark).snapshots
    assert result.version == 2 and a.versions == b.versions == [1, 2]
    assert held(a) == held(b) == image(1)


def test_a_sink_whose_target_check_fails_is_still_staged_and_catches_up(
        spark, memory_sinks, tmp_path):
    a, b = memory_sinks.add("a"), memory_sinks.add("b")
    table = Table(memory_sinks, tmp_path, [a, b])
    table.write(0)
    table.run(spark)
    a.fail_at("check", version=2, kind="transient", times=1)
    table.write(1)
    error = table.fails(spark, TransientStorageError)
    assert error.message.startswith("sink a:")
    assert table.head() == 2 and table.published(2) == {"b"}
    assert a.calls_at("stage") == [1, 2]  # committed and staged for it too
    assert (a.versions, b.versions) == ([1], [1, 2])

    report = table.run(spark)  # the fault fired once: the sink works again
    assert report.resumed_versions == [2] and a.versions == [1, 2]
    assert held(a) == held(b) == image(1)
    a.assert_once_in_order()
    b.assert_once_in_order()


@pytest.mark.parametrize("step, kind, error, exit_code", [
    ("accept", "terminal", InputRefused, 3),
    ("stage", "terminal", TargetMismatch, 1),
])
def test_a_failure_before_the_commit_commits_nothing_for_any_sink(
        spark, memory_sinks, tmp_path, step, kind, error, exit_code):
    a, b = memory_sinks.add("a"), memory_sinks.add("b")
    table = Table(memory_sinks, tmp_path, [a, b])
    table.write(0)
    table.run(spark)
    b.fail_at(step, version=2, kind=kind)
    table.write(1)
    caught = table.fails(spark, error)
    assert caught.report.exit_code == exit_code
    assert table.head() == 1 and a.versions == b.versions == [1]
    assert 2 not in a.calls_at("publish")

    b.heal()
    (result,) = table.run(spark).snapshots
    assert result.version == 2 and a.versions == b.versions == [1, 2]
    assert held(a) == held(b) == image(1)


def test_an_unexpected_error_in_a_sink_fails_the_run_and_the_next_run_publishes_once(
        spark, memory_sinks, tmp_path):
    """A sink raising something that is not a diffcdc error (a bug) fails that sink alone,
    named, after the commit; the other sink publishes, and the next run publishes the version
    to the failed one, once."""
    a, b = memory_sinks.add("a"), memory_sinks.add("b")
    table = Table(memory_sinks, tmp_path, [a, b])
    table.write(0)
    table.run(spark)
    a.fail_at("publish", version=2, kind="unexpected", times=1)
    table.write(1)
    caught = table.fails(spark)
    assert "RuntimeError: injected unexpected failure" in caught.message
    assert caught.message.startswith("sink a: publishing version 2 failed")
    assert table.head() == 2 and table.published(2) == {"b"}

    report = table.run(spark)
    assert report.resumed_versions == [2]
    assert a.versions == b.versions == [1, 2] and held(a) == held(b) == image(1)
    a.assert_once_in_order()
    b.assert_once_in_order()


def test_a_failing_replay_fails_verify_not_the_target(spark, memory_sinks, tmp_path):
    a = memory_sinks.add("a")
    table = Table(memory_sinks, tmp_path, [a])
    sid = table.write(0)
    table.run(spark)
    a.fail_at("replay", kind="transient", times=1)
    with pytest.raises(TransientStorageError):
        table.verify(spark, sid)
    assert table.verify(spark, sid) == {"a": True}
