"""A sink's own disk (issue 38): the sink contract's class "sink disk full or read-only".

Over the file-based sink kinds (a local landing zone, a Delta table, a history), each with a
healthy sink of another kind beside it on another disk: the broken sink's folder lies on a real
disk that turns read-only (a read-only bind mount) or full (a small tmpfs filled up). The run
that meets it fails that sink alone — one line naming the sink, its path and what is wrong with
the disk, exit 1 — while the healthy sink publishes; once the disk is fixed a rerun publishes
the backlog exactly (replayed and read back independently). Mounting needs root
(tests/support/disks.py); without it these tests are skipped, saying so.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.config import TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import DiffcdcError
from diffcdc.state.store import TableState
from tests.support.disks import full, need_mounts, read_only, small_disk
from tests.support.sink_kinds import KINDS, SinkKind
from tests.support.workspace import PERMISSIVE

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
FILE_KINDS = [k for k in KINDS if k.name in ("landing_local", "delta", "history")]
BY_NAME = {k.name: k for k in KINDS}
DISK_WORDS = {"read_only": "the file system is read-only", "full": "no space left on the device"}


def snapshot(n: int) -> pa.Table:
    """Snapshot ``n``: inserts, then updates, deletes and new keys each time."""
    ids = [i for i in range(1, 40 + 5 * n) if i % (n + 2)]
    return pa.Table.from_pylist(
        [{"id": i, "name": f"v{n}-{i}" if i % 3 == 0 else f"k{i}", "score": i / 4 if i % 5 else None}
         for i in ids], SCHEMA)


def _entry(kind: SinkKind, root: str) -> dict:
    entry = kind.entry(root, {})
    if kind.type == "open_mirroring":
        entry["max_rows_per_file"] = 10  # several files a version: a publish stops midway
    return entry


def _healthy_kind(broken: SinkKind) -> SinkKind:
    return BY_NAME["delta"] if broken.type == "open_mirroring" else BY_NAME["landing_local"]


def _sink_path(entry: dict) -> str:
    return entry.get("landing") or entry["path"]


def _assert_exact(spark, table: TableConfig, state: str, sid: str, sinks: list[str]) -> None:
    results = verify_table(spark, table, state, os.path.join(table.source, sid))
    assert {s: results[s].identical for s in sinks} == dict.fromkeys(sinks, True), {
        s: r.to_dict() for s, r in results.items()}


def _delta_rows(path: str) -> list[tuple]:
    """An independent reader's view of a current-image Delta table (delta-rs)."""
    from deltalake import DeltaTable

    rows = DeltaTable(path).to_pyarrow_table(columns=["id", "name", "score"]).to_pylist()
    return sorted((r["id"], r["name"], r["score"]) for r in rows)


@pytest.mark.parametrize("disk", ["read_only", "full"])
@pytest.mark.parametrize("kind", FILE_KINDS, ids=[k.name for k in FILE_KINDS])
def test_a_sink_disk_read_only_or_full_fails_that_sink_alone(spark, tmp_path, kind, disk):
    need_mounts()
    root = str(tmp_path)
    source, state = os.path.join(root, "source"), os.path.join(root, "state")
    os.makedirs(source)
    healthy_kind = _healthy_kind(kind)
    with small_disk(os.path.join(root, "disk"), "16m") as disk_root:
        broken, healthy = _entry(kind, disk_root), _entry(healthy_kind, root)
        table = TableConfig(name="T", source=source, keys=["id"], sinks=[broken, healthy])
        broken_id, healthy_id = (s.sink_id for s in table.sinks)
        options = RunOptions(quality=PERMISSIVE)

        def write(n: int) -> str:
            sid = f"{n:04d}.parquet"
            pq.write_table(snapshot(n), os.path.join(source, sid))
            return sid

        write(1)
        run_table(spark, table, state, options)
        sid2 = write(2)
        fault = read_only(disk_root) if disk == "read_only" else full(disk_root)
        with fault, pytest.raises(DiffcdcError) as caught:
            run_table(spark, table, state, options)
        error = caught.value
        text = str(error)
        assert error.exit_code == 1 and len(text.splitlines()) == 1, text
        assert error.message.startswith(f"sink {broken_id}: "), text
        assert _sink_path(broken) in text and DISK_WORDS[disk] in text.lower(), text
        assert state not in text, text  # the sink's disk, not the state's
        assert f"sink(s) {healthy_id} published" in text, text
        tstate = TableState(state, "T")
        head = tstate.head()
        assert head is not None and head.version == 2  # committed: it waits for the sink
        assert head.published_sinks == {healthy_id}
        _assert_exact(spark, table, state, sid2, [healthy_id])

        # The disk fixed: the rerun publishes the backlog, exactly and once.
        report = run_table(spark, table, state, options)
        assert report.resumed_versions == [2] and report.outcome == "ok"
        _assert_exact(spark, table, state, sid2, [broken_id, healthy_id])
        sid3 = write(3)
        run_table(spark, table, state, options)
        _assert_exact(spark, table, state, sid3, [broken_id, healthy_id])
        for sink_kind, entry in ((kind, broken), (healthy_kind, healthy)):
            sink_kind.assert_once(TableState(state, "T"), entry["name"], {})
        delta = broken if kind.name == "delta" else healthy if healthy_kind.name == "delta" else None
        if delta is not None:
            want = sorted((r["id"], r["name"], r["score"]) for r in snapshot(3).to_pylist())
            assert _delta_rows(delta["path"]) == want
        if kind.type == "open_mirroring":  # no upload of ours left behind on the landing disk
            folder = os.path.join(broken["landing"], "T")
            assert not [n for n in os.listdir(folder) if n.startswith("_") and n != "_metadata.json"]


def test_a_read_only_landing_leaves_delta_history_and_kafka_published(spark, servers, tmp_path):
    """The issue's case: a landing folder that turns read-only beside a Delta, a history and a
    Kafka sink of the same table. The landing sink fails alone, named with its folder; the
    other three publish the version; once writable, the landing catches up exactly."""
    need_mounts()
    root = str(tmp_path)
    source, state = os.path.join(root, "source"), os.path.join(root, "state")
    os.makedirs(source)
    others = [BY_NAME[n] for n in ("delta", "history", "kafka")]
    disk_root = os.path.join(root, "disk")
    os.makedirs(disk_root)
    landing = _entry(BY_NAME["landing_local"], disk_root)
    table = TableConfig(name="T", source=source, keys=["id"],
                        sinks=[landing, *[k.entry(root, servers) for k in others]])
    options = RunOptions(quality=PERMISSIVE)
    pq.write_table(snapshot(1), os.path.join(source, "0001.parquet"))
    run_table(spark, table, state, options)
    pq.write_table(snapshot(2), os.path.join(source, "0002.parquet"))
    with read_only(disk_root), pytest.raises(DiffcdcError) as caught:
        run_table(spark, table, state, options)
    text = str(caught.value)
    assert caught.value.exit_code == 1 and len(text.splitlines()) == 1, text
    assert caught.value.message.startswith("sink landing_local: publishing version 2 failed: "
                                           "the file system is read-only"), text
    assert landing["landing"] in text and "sink(s) delta, history, kafka published" in text
    assert TableState(state, "T").head().published_sinks == {"delta", "history", "kafka"}
    _assert_exact(spark, table, state, "0002.parquet", ["delta", "history", "kafka"])
    assert run_table(spark, table, state, options).resumed_versions == [2]
    _assert_exact(spark, table, state, "0002.parquet", ["landing_local", "delta", "history",
                                                        "kafka"])
    for kind in [BY_NAME["landing_local"], *others]:
        kind.assert_once(TableState(state, "T"), kind.name, servers)
