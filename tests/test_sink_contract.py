"""One contract, every sink: replaying a sink's output gives the snapshot; crashes change nothing.

1. Property (every sink kind on one table): random snapshot sequences — composite keys, NULLs everywhere
   else, awkward types, NULL swaps, key changes, deletes and re-inserts — run one snapshot at
   a time; after each, the sink's output replayed from nothing equals that snapshot.
2. Crashes (all sink kinds on one table): a real ``diffcdc run`` process dies like ``kill -9``
   at every step boundary and inside each sink's publishing; a rerun finishes, every sink
   replays the latest snapshot, and each sink's own check finds nothing applied twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from diffcdc.config import StateCompaction, TableConfig
from diffcdc.engine.run import RunOptions, RunRequest, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.state.chain import state_chain
from diffcdc.state.store import TableState
from tests.support.config_text import table_toml
from tests.support.contract import (
    assert_once,
    assert_replays,
    table_config,
    two_versions_published,
    write_rows,
)
from tests.support.hypothesis_profiles import examples
from tests.support.sink_kinds import KINDS
from tests.support.snapshots import snapshot_sequences, snapshot_table
from tests.support.workspace import PERMISSIVE, expected_counts

pytestmark = pytest.mark.slow
STEPS = ["after_read", "after_state_staged", "after_changes_staged", "after_claim",
         "before_mark_published", "after_published"]



def _write(root: str, sid: str, rows: dict, seed: int) -> None:
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(root, "source"), exist_ok=True)
    pq.write_table(snapshot_table(rows, seed), os.path.join(root, "source", sid))


@pytest.mark.default_tier
@pytest.mark.spark35_smoke
def test_replaying_a_sink_gives_every_snapshot(spark, servers):
    """Every sink kind on one table: each generated sequence is diffed once per snapshot and
    published to a sink of each kind, and every sink replays every snapshot (each kind sees
    the same count of random sequences as a table of its own would, for one diff each)."""
    @settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
    @given(snapshots=snapshot_sequences())
    def body(snapshots):
        with tempfile.TemporaryDirectory(dir=None) as root:
            table = table_config(root, KINDS, servers)
            state = os.path.join(root, "state")
            previous: dict = {}
            for i, rows in enumerate(snapshots):
                sid = f"{i + 1:08d}.parquet"
                _write(root, sid, rows, seed=i)
                (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
                got = {k: getattr(result, k) for k in ("inserted", "updated", "deleted")}
                assert got == expected_counts(previous, rows), sid  # minimal
                assert_replays(spark, table, state, sid)
                previous = rows
            assert_once(table, state, servers)

    body()


def _run_snapshots(spark, servers, root: str, keys: list[str], schema,
                   snapshots: list[list[dict]]) -> list[tuple[int, int, int]]:
    """Each snapshot run through one table with a sink of every kind, and replayed in each;
    (inserted, updated, deleted) of each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = os.path.join(root, "source")
    os.makedirs(source)
    table = TableConfig(name="T", source=source, keys=keys,
                        sinks=[kind.entry(root, servers) for kind in KINDS])
    state = os.path.join(root, "state")
    counts = []
    for i, rows in enumerate(snapshots):
        sid = f"{i + 1:08d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema), os.path.join(source, sid))
        (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
        counts.append((result.inserted, result.updated, result.deleted))
        assert_replays(spark, table, state, sid)
    assert_once(table, state, servers)
    return counts


AWKWARD_KEY = "k.1 `x`"


def _awkward_row(k, text, number, ab, c, entries) -> dict:
    return {AWKWARD_KEY: k, "it's": text, "back\\slash": number, "s t": {"a.b": ab, "c'`": c},
            "m": entries}


def test_names_that_need_quoting_and_reordered_maps_replay_in_every_sink(spark, servers, tmp_path):
    """Dots, spaces, quotes, backticks and backslashes in the key, columns and struct fields;
    a map whose entries come in another order is the same map (no change, and still equal)."""
    import pyarrow as pa

    schema = pa.schema([
        (AWKWARD_KEY, pa.int64()), ("it's", pa.string()), ("back\\slash", pa.float64()),
        ("s t", pa.struct([("a.b", pa.int32()), ("c'`", pa.string())])),
        ("m", pa.map_(pa.string(), pa.int32())),
    ])
    snapshots = [
        [_awkward_row(1, "a", 1.0, 1, "x", [("b", 1), ("a", 2)]),
         _awkward_row(2, None, None, 2, "y", None), _awkward_row(3, "c", -0.0, None, None, [])],
        [_awkward_row(1, "a", 1.0, 1, "x", [("a", 2), ("b", 1)]),
         _awkward_row(2, None, None, 20, "y", None), _awkward_row(4, "it's", 2.5, 4, "`", [("c", None)])],
    ]
    counts = _run_snapshots(spark, servers, str(tmp_path), [AWKWARD_KEY], schema, snapshots)
    assert counts == [(3, 0, 0), (1, 1, 1)]


def _typed_row(i: int, v: int) -> dict:
    import datetime as dt
    from decimal import Decimal

    return {
        "kd": dt.date(2000, 1, 1) + dt.timedelta(days=i),
        "kdec": Decimal(f"{i}.123456789012345678"), "kb": bytes([i, 0, 255]),
        "ntz": dt.datetime(1999, 12, 31, 23, 59, 59, 999999) if v else None,
        "f32": 1.5 * v, "i8": -128 + v, "i16": 32767 - v, "big": Decimal(10**37 + v),
        "ls": "é" * v, "los": [{"x": v, "y": ["a", None]}, None] if v % 2 else [],
        "ms": [(2, {"z": float(v)}), (1, None)] if v % 3 else None,
    }


def test_typed_keys_and_nested_values_replay_in_every_sink(spark, servers, tmp_path):
    """A key of a date, a decimal(38, 18) and bytes; timestamp without time zone, float32,
    int8/int16, decimal(38, 0), large strings, lists of structs of lists, maps of structs."""
    import pyarrow as pa

    schema = pa.schema([
        ("kd", pa.date32()), ("kdec", pa.decimal128(38, 18)), ("kb", pa.binary()),
        ("ntz", pa.timestamp("us")), ("f32", pa.float32()), ("i8", pa.int8()),
        ("i16", pa.int16()), ("big", pa.decimal128(38, 0)), ("ls", pa.large_string()),
        ("los", pa.list_(pa.struct([("x", pa.int64()), ("y", pa.list_(pa.string()))]))),
        ("ms", pa.map_(pa.int64(), pa.struct([("z", pa.float64())]))),
    ])
    snapshots = [[_typed_row(i, i) for i in range(6)],
                 [_typed_row(i, i + i % 2) for i in range(1, 8)]]
    counts = _run_snapshots(spark, servers, str(tmp_path), ["kd", "kdec", "kb"], schema,
                            snapshots)
    assert counts == [(6, 0, 0), (2, 3, 1)]


FIRST = {(i, "a"): {"s1": f"n{i}", "s2": None, "n": i, "d": None, "dec": None, "day": None,
                    "ts": None, "flag": None, "blob": None, "arr": None, "st": None, "m": None}
         for i in range(7)}
SECOND = {**{k: {**v, "s1": "changed"} for k, v in FIRST.items() if k[0] < 3},
          **{k: v for k, v in FIRST.items() if 3 <= k[0] < 6},
          (9, "b"): {**FIRST[(1, "a")], "s2": "new"}}
THIRD = {**{k: v for k, v in SECOND.items() if k != (4, "a")},
         (0, "a"): {**SECOND[(0, "a")], "n": 100}, (10, "c"): {**FIRST[(2, "a")], "s2": "third"}}


#: Kill points of the default tier: the commit boundary, and inside each kind of publishing
#: (a landing upload, local and remote; the Delta commit; the Kafka transaction; a sink's mark).
#: Every other point is marked ``exhaustive`` and runs with ``pytest -m exhaustive``.
CORE_POINTS = {"after_claim", "publish@landing_local:1", "publish@landing_dfs:1", "delta_committed@history",
               "delta_committed@delta", "kafka_after_commit@kafka", "before_mark_published@kafka",
               "postgres_before_commit@postgres"}
#: The kill at the commit boundary (committed, nothing published): in the default tier.
COMMIT_BOUNDARY = "after_claim"


def _crash_points() -> list[Any]:
    points = list(STEPS)
    for kind in KINDS:
        points += list(kind.crash_points) + [f"before_mark_published@{kind.name}"]
    assert CORE_POINTS <= set(points)
    return [pytest.param(p, marks=[pytest.mark.default_tier, pytest.mark.spark35_smoke])
            if p == COMMIT_BOUNDARY
            else p if p in CORE_POINTS else pytest.param(p, marks=pytest.mark.exhaustive)
            for p in points]


#: The version killed writes a delta on its head, or (compaction) a base folding a base and a
#: delta.
STATE_WRITES = {"delta": StateCompaction(max_delta_ratio=100.0),
                "compaction": StateCompaction(max_deltas=1)}


@pytest.mark.parametrize("state_write", list(STATE_WRITES))
@pytest.mark.parametrize("point", _crash_points())
def test_a_run_killed_anywhere_is_finished_exactly_once_in_every_sink(spark, servers, tmp_path, point,
                                                                      state_write):
    root = str(tmp_path)
    table = table_config(root, KINDS, servers, STATE_WRITES[state_write])
    state = os.path.join(root, "state")
    before = [FIRST] if state_write == "delta" else [FIRST, SECOND]
    for i, rows in enumerate(before):
        _write(root, f"{i + 1}.parquet", rows, seed=i)
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    last = f"{len(before) + 1}.parquet"
    _write(root, last, SECOND if state_write == "delta" else THIRD, seed=len(before))
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["DIFFCDC_CRASH_AT"] = point
    crashed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config", config,
         "--master", "local[1]"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))  # the next run finishes the job
    assert_replays(spark, table, state, last)
    tstate = TableState(state, "T")
    assert tstate.head().snapshot_id == last and tstate.head().published
    assert [link.delta for link in state_chain(tstate.commits())] == (
        [False, True] if state_write == "delta" else [False])
    for kind, sink in zip(KINDS, table.sinks):
        kind.assert_once(tstate, sink.sink_id, servers)
    again = run_table(spark, table, state, RunOptions(quality=PERMISSIVE))  # and then: nothing to do
    assert again.outcome == "nothing to do"


@pytest.mark.parametrize("how", ["foreign", "gone"])
@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_a_target_changed_or_gone_is_refused_alone_and_reload_sink_replays_it(
        spark, servers, kind, how, tmp_path):
    """Another writer changed the target, or it was deleted: that sink is refused (never
    exit 0 with a target that differs), publishes nothing, and keeps being refused; the
    table's other sink goes on; ``reload --sink`` gives it a full image and it replays."""
    from diffcdc.errors import PublishConflict, TargetMismatch

    root = str(tmp_path)
    table, sink_id, other_id, state = two_versions_published(spark, servers, kind, root)
    assert kind.tamper is not None
    kind.tamper(TableState(state, "T"), sink_id, servers, how)
    write_rows(root, "3.parquet", 13, "c")
    for _ in range(2):  # refused again by the next run: nothing resolves it silently
        with pytest.raises((TargetMismatch, PublishConflict), match=f"sink {sink_id}") as refused:
            run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
        assert f"diffcdc reload --table T --sink {sink_id} --yes" in str(refused.value)
    assert TableState(state, "T").head().unpublished == [sink_id]
    results = verify_table(spark, table, state, os.path.join(table.source, "3.parquet"),
                           only=other_id)
    assert results[other_id].identical, results[other_id].to_dict()
    if how == "foreign" and kind.name.startswith("landing"):  # verify says so in one line
        with pytest.raises(TargetMismatch, match="not readable Parquet"):
            verify_table(spark, table, state, os.path.join(table.source, "3.parquet"),
                         only=sink_id)
    report = run_table(spark, table, state, RunOptions(
        quality=PERMISSIVE, request=RunRequest(reload=True, reload_sinks=(sink_id,))))
    assert report.outcome == "ok" and report.snapshots[0].sinks[other_id]["rows"] == 0
    assert_replays(spark, table, state, "3.parquet")
    write_rows(root, "4.parquet", 11, "d")
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    assert_replays(spark, table, state, "4.parquet")
