"""A sink's I/O is the sink's (issue 38), with in-memory sinks told to fail like a disk
(tests/support/memory_sink.py: the OSError of a read-only or full disk, or any exception).

* an exception while a sink is prepared, checked, accepts a change set or publishes fails that
  sink alone, named with its target and the way out; the table's other sink publishes, and the
  failed one catches up in order once it works;
* a sink that cannot stage (its output goes to the state's version folder, the state's disk)
  stops the version: nothing is committed for any sink, the message names the sink and the
  staging path, and a rerun commits it for all;
* the state's own disk failing (recording a sink's mark) stays the state's failure, naming the
  state's path, never a sink's.
"""

from __future__ import annotations

import errno
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.engine.context import RunOptions
from diffcdc.engine.run import run_table
from diffcdc.engine.unexpected import unexpected_error
from diffcdc.errors import DiffcdcError, StorageError
from diffcdc.state.store import TableState
from tests.support.workspace import PERMISSIVE

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
SNAPSHOTS = [
    [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}],
    [{"id": 1, "name": "A"}, {"id": 3, "name": "c"}, {"id": 4, "name": "d"}],
]
WORDS = {"read_only": "the file system is read-only", "full": "no space left on the device",
         "unexpected": "RuntimeError: injected unexpected failure"}


class Table:
    """Table T with memory sinks ``a`` (healthy) and ``b`` (told to fail)."""

    def __init__(self, memory_sinks, root, names: tuple[str, ...] = ("a", "b")) -> None:
        self.source = os.path.join(str(root), "source")
        self.state = os.path.join(str(root), "state")
        os.makedirs(self.source)
        self.targets = [memory_sinks.add(n) for n in names]
        self.config = memory_sinks.table("T", self.source, ["id"], self.targets)
        self.written = 0

    def write(self, i: int) -> None:
        self.written += 1
        pq.write_table(pa.Table.from_pylist(SNAPSHOTS[i], SCHEMA),
                       os.path.join(self.source, f"{self.written}.parquet"))

    def run(self, spark):
        return run_table(spark, self.config, self.state, RunOptions(quality=PERMISSIVE))

    def fails(self, spark) -> DiffcdcError:
        with pytest.raises(DiffcdcError) as caught:
            self.run(spark)
        error = caught.value
        assert len(str(error).splitlines()) == 1 and error.exit_code == 1, str(error)
        return error

    def commits(self):
        return TableState(self.state, "T").commits()


def rows(i: int) -> list[dict]:
    return sorted(SNAPSHOTS[i], key=lambda r: r["id"])


def held(target) -> list[dict]:
    return sorted(target.image(), key=lambda r: r["id"])


@pytest.mark.parametrize("kind", ["read_only", "full", "unexpected"])
@pytest.mark.parametrize("step", ["prepare", "check", "accept", "publish"])
def test_a_sink_failing_at_any_step_fails_alone_and_catches_up(
        spark, memory_sinks, tmp_path, step, kind):
    table = Table(memory_sinks, tmp_path)
    a, b = table.targets
    table.write(0)
    table.run(spark)
    b.fail_at(step, kind=kind, times=1)
    table.write(1)
    error = table.fails(spark)
    text = str(error)
    assert error.message.startswith("sink b: ") and "memory:b" in text, text
    assert WORDS[kind] in text and "sink(s) a published" in text, text
    if kind != "unexpected":
        assert f"/memory/b/{step}.tmp" in text and "--sink b" in text, text  # the way out
    head = table.commits()[-1]
    assert head.version == 2 and head.published_sinks == {"a"}  # committed, waiting for b
    assert (a.versions, b.versions) == ([1, 2], [1])
    assert held(a) == rows(1)

    report = table.run(spark)  # the fault fired once: b works again
    assert report.resumed_versions == [2] and b.versions == [1, 2]
    assert held(a) == held(b) == rows(1)
    a.assert_once_in_order()
    b.assert_once_in_order()


@pytest.mark.parametrize("kind", ["read_only", "full", "unexpected"])
def test_a_sink_that_cannot_stage_stops_the_version_for_every_sink(
        spark, memory_sinks, tmp_path, kind):
    """Staged output goes to the state's version folder: the version is not committed (a
    version without b's output would leave b only a full image to start from); a disk failure
    there is the state's disk, named with the sink and the staging path."""
    table = Table(memory_sinks, tmp_path)
    a, b = table.targets
    table.write(0)
    table.run(spark)
    b.fail_at("stage", kind=kind, times=1)
    table.write(1)
    error = table.fails(spark)
    text = str(error)
    staging = os.path.join(table.state, "T", "versions")
    assert WORDS[kind] in text, text
    if kind != "unexpected":  # the state's disk, named
        assert error.message.startswith("sink b: staging version 2 under ") and staging in text
        assert "on the state's disk" in text and "nothing was committed" in text, text
    else:  # anything else (staging reads the snapshot again) is the run's, as before
        assert "run again with --debug" in text, text
    assert [c.version for c in table.commits()] == [1]
    assert os.listdir(staging) == [next(iter(os.listdir(staging)))]  # only version 1's folder
    assert (a.versions, b.versions) == ([1], [1])

    (result,) = table.run(spark).snapshots
    assert result.version == 2 and a.versions == b.versions == [1, 2]
    assert held(a) == held(b) == rows(1)


def test_a_disk_failing_the_only_sink_before_the_commit_commits_nothing(
        spark, memory_sinks, tmp_path):
    table = Table(memory_sinks, tmp_path, names=("b",))
    (b,) = table.targets
    table.write(0)
    table.run(spark)
    b.fail_at("check", kind="read_only", times=1)
    table.write(1)
    error = table.fails(spark)
    assert error.message.startswith("sink b: checking its target failed: the file system is "
                                    "read-only"), str(error)
    assert [c.version for c in table.commits()] == [1]
    (result,) = table.run(spark).snapshots
    assert result.version == 2 and b.versions == [1, 2] and held(b) == rows(1)


def test_the_state_disk_failing_while_a_mark_is_recorded_is_the_states_failure(
        spark, memory_sinks, tmp_path, monkeypatch):
    table = Table(memory_sinks, tmp_path)
    a, b = table.targets
    table.write(0)
    table.run(spark)
    original = TableState.mark_published
    failed = []

    def full_state(self, version, sink_id, info):
        if version == 2 and sink_id == "a" and not failed:
            failed.append(sink_id)
            path = os.path.join(self.dir, "log", f"{version:020d}.published.a.json")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return original(self, version, sink_id, info)

    monkeypatch.setattr(TableState, "mark_published", full_state)
    table.write(1)
    error = table.fails(spark)
    text = str(error)
    assert isinstance(error, StorageError) and "sink" not in error.message, text
    assert f"no space left on the device under {table.state}/T/log/" in text, text
    assert "free space on the state's disk" in text, text
    assert [c.version for c in table.commits()] == [1, 2]  # committed; a published, unmarked

    report = table.run(spark)
    assert report.resumed_versions == [2]
    assert a.versions == b.versions == [1, 2] and held(a) == held(b) == rows(1)
    a.assert_once_in_order()
    b.assert_once_in_order()


def test_a_disk_failure_is_blamed_on_the_state_only_when_it_is_the_states(tmp_path):
    """No Spark: how unexpected_error words a disk failure that reaches it."""
    state = str(tmp_path / "state" / "T")
    outside = OSError(errno.EACCES, "Permission denied", str(tmp_path / "src" / "1.parquet"))
    assert "state" not in str(unexpected_error(outside, state_dir=state))
    inside = OSError(errno.EROFS, "Read-only file system", os.path.join(state, "log", "x"))
    error = unexpected_error(inside, state_dir=state)
    assert isinstance(error, StorageError) and str(error).startswith(
        f"the file system is read-only under {state}/log/x — make the state's folder writable")
    spark_text = RuntimeError("Job aborted.\nCaused by: java.io.IOException: No space left on "
                              "device")
    assert str(unexpected_error(spark_text, state_dir=state)).startswith(
        f"no space left on the device under {state} — free space on the state's disk")


def test_run_dataframe_refuses_a_sink_inside_its_state_root(spark, tmp_path):
    """The config check of a state root and a sink folder one inside the other holds for
    run_dataframe too (its state root is an argument, not a config file's)."""
    import diffcdc
    from diffcdc.errors import ConfigError

    state = str(tmp_path / "state")
    with pytest.raises(ConfigError) as caught:
        diffcdc.run_dataframe(spark.range(3), table="T", keys=["id"], state=state,
                              landing=os.path.join(state, "landing"))
    text = str(caught.value)
    assert caught.value.exit_code == 2 and len(text.splitlines()) == 1, text
    assert f"lies inside the state root {state}" in text and "sink 'open_mirroring'" in text
    assert not os.path.exists(state)
