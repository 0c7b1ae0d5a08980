"""The sink contract with a history layout (issue 41 items 2 and 3): every sink kind on one
table, and beside them the history with deletes as tombstone rows, dbt's column names and both
open-end sentinels (tests/support/history_kinds.py).

1. Replay: a fixed sequence (deletes, a key change, a key back after its delete; in the
   default tier) and random ones (NULLs, awkward types ...), one snapshot at a time; after
   each, every sink replays that snapshot, the history is exact as of every version
   (tombstones left out), nothing is applied twice.
2. Kills: a real ``diffcdc run`` process dies inside the layout history's commit (every other
   step with ``-m exhaustive``), and a ``diffcdc reload`` that rebuilds a history in a new
   layout dies between its rebuild and its merge: the next run finishes exactly once.
3. The layout history through a Spark Connect client without Java.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings

from diffcdc.config import StateCompaction, TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.state.store import TableState
from tests.support.config_text import table_toml
from tests.support.contract import KEYS, assert_once, assert_replays
from tests.support.history import Names
from tests.support.history_kinds import HISTORY_DBT, NAMES, SETTINGS, WITH_LAYOUT, history_once
from tests.support.hypothesis_profiles import examples
from tests.support.snapshots import snapshot_sequences, snapshot_table
from tests.support.workspace import PERMISSIVE, expected_counts

pytestmark = pytest.mark.slow
STEPS = ["after_read", "after_state_staged", "after_changes_staged", "after_claim",
         "before_mark_published", "after_published"]
FIRST = {(i, "a"): {"s1": f"n{i}", "s2": None, "n": i, "d": None, "dec": None, "day": None,
                    "ts": None, "flag": None, "blob": None, "arr": None, "st": None, "m": None}
         for i in range(7)}
SECOND = {**{k: {**v, "s1": "changed"} for k, v in FIRST.items() if k[0] < 3},
          **{k: v for k, v in FIRST.items() if 3 <= k[0] < 5},  # 5, 6 deleted
          (9, "b"): {**FIRST[(1, "a")], "s2": "new"}}
THIRD = {**{k: v for k, v in SECOND.items() if k != (4, "a")},
         (5, "a"): FIRST[(5, "a")]}  # 4 deleted, 5 back after its delete


def _table(root: str, servers, kinds=WITH_LAYOUT, **fields) -> TableConfig:
    return TableConfig(name="T", source=os.path.join(root, "source"), keys=list(KEYS),
                       sinks=[kind.entry(root, servers) for kind in kinds],
                       state_compaction=StateCompaction(max_deltas=2), **fields)


def _write(root: str, sid: str, rows: dict, seed: int) -> None:
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(root, "source"), exist_ok=True)
    pq.write_table(snapshot_table(rows, seed), os.path.join(root, "source", sid))


def _replay_each(spark, servers, root: str, snapshots: list[dict], *, each: bool = True) -> None:
    """Each snapshot run through one table with a sink of every kind and the layout history;
    after each, every sink replays it; at the end the history is exact as of every version
    and nothing was applied twice in any sink (``each``: every sink replays every snapshot;
    else the last one, the history every one)."""
    table = _table(root, servers)
    state = os.path.join(root, "state")
    previous: dict = {}
    for i, rows in enumerate(snapshots):
        sid = f"{i + 1:08d}.parquet"
        _write(root, sid, rows, seed=i)
        (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
        got = {k: getattr(result, k) for k in ("inserted", "updated", "deleted")}
        assert got == expected_counts(previous, rows), sid  # minimal
        if each or i == len(snapshots) - 1:
            assert_replays(spark, table, state, sid)
        previous = rows
    assert_once(table, state, servers, WITH_LAYOUT)  # (the history's: as of every version)


@pytest.mark.default_tier
def test_every_sink_and_a_history_layout_replay_deletes_keys_back_and_key_changes(
        spark, servers, tmp_path):
    """The default tier's example: deletes (5, 6), a key change (a delete and an insert), a
    key back after its delete (5)."""
    _replay_each(spark, servers, str(tmp_path), [FIRST, SECOND, THIRD], each=False)


def test_every_sink_and_a_history_layout_replay_random_sequences(spark, servers):
    @settings(max_examples=examples(3), deadline=None, suppress_health_check=list(HealthCheck))
    @given(snapshots=snapshot_sequences())
    def body(snapshots):
        with tempfile.TemporaryDirectory() as root:
            _replay_each(spark, servers, root, snapshots)

    body()


def _kill(root: str, config: str, point: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["DIFFCDC_CRASH_AT"] = point
    crashed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", *args, "--quiet", "--config", config,
         "--master", "local[1]"],
        env=env, capture_output=True, text=True, timeout=300, check=False, cwd=root)
    assert crashed.returncode == 137, crashed.stderr[-2000:]


#: Inside the layout history's commit: in the suite; every other step (the same for every
#: sink: tests/test_sink_contract.py runs them in the suite) with ``-m exhaustive``.
CORE = {*HISTORY_DBT.crash_points}


def _points() -> list:
    points = [*STEPS, *HISTORY_DBT.crash_points, "before_mark_published@history_dbt"]
    return [p if p in CORE else pytest.param(p, marks=pytest.mark.exhaustive) for p in points]


@pytest.mark.parametrize("point", _points())
def test_a_run_killed_anywhere_is_finished_exactly_once_with_a_history_layout(
        spark, servers, tmp_path, point):
    root = str(tmp_path)
    table = _table(root, servers)
    state = os.path.join(root, "state")
    _write(root, "1.parquet", FIRST, seed=0)
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    _write(root, "2.parquet", SECOND, seed=1)
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state))
    _kill(root, config, point, "run")
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))  # the next run finishes it
    _write(root, "3.parquet", THIRD, seed=2)
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    assert_replays(spark, table, state, "3.parquet")
    tstate = TableState(state, "T")
    assert tstate.head().snapshot_id == "3.parquet" and tstate.head().published
    assert_once(table, state, servers, WITH_LAYOUT)
    again = run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    assert again.outcome == "nothing to do"


@pytest.mark.parametrize("point", [
    "delta_history_converted@history",
    pytest.param("delta_committed@history", marks=pytest.mark.exhaustive)])
def test_a_reload_into_a_new_layout_killed_in_its_publishing_is_finished_exactly_once(
        spark, servers, tmp_path, point):
    """A history made with the defaults; the config takes the dbt layout; ``diffcdc reload
    --sink history`` dies after the rebuild's commit, or after the merge: the next run
    finishes the reload once, and the history is every version in the new layout."""
    root = str(tmp_path)
    plain = {"type": "delta", "name": "history", "path": os.path.join(root, "lake", "h"),
             "mode": "scd2"}
    table = TableConfig(name="T", source=os.path.join(root, "source"), keys=list(KEYS),
                        sinks=[plain])
    state = os.path.join(root, "state")
    for i, rows in enumerate([FIRST, SECOND, THIRD]):
        _write(root, f"{i + 1}.parquet", rows, seed=i)
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    history_once(TableState(state, "T"), "history", Names())
    table = table.model_copy(update={"sinks": [{**plain, **SETTINGS}]})
    table = TableConfig.model_validate(table.model_dump())
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state))
    _kill(root, config, point, "reload", "--table", "T", "--sink", "history", "--yes")
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))  # finishes the reload
    assert TableState(state, "T").head().published
    assert_replays(spark, table, state, "3.parquet")
    from deltalake import DeltaTable

    repairs = [h for h in DeltaTable(plain["path"]).history() if "diffcdc.repair" in h]
    assert len(repairs) == 1  # rebuilt once
    history_once_all(TableState(state, "T"), NAMES)


def history_once_all(state: TableState, names: Names) -> None:
    """The rebuilt history holds every version from the first on (the rebuild kept them)."""
    import pyarrow.parquet as pq

    from tests.support.history import as_of, canonical, check_history, history_rows

    commits = state.commits()
    rows = history_rows(commits[-1].record.sinks["history"].manifest["target"])
    check_history(rows, commits[-1].record.keys, names=names)
    for commit in commits:
        data = pq.read_table(commit.record.snapshot_path)
        assert canonical(as_of(rows, commit.version, names), data.column_names) == canonical(
            data.to_pylist()), commit.version


@pytest.mark.connect
def test_a_history_layout_through_a_connect_server(spark, servers, connect_server, tmp_path):
    """The engine through a Connect client without Java (the other sink kinds run so in
    tests/test_connect.py): the layout history is exact after each snapshot."""
    from tests.support.connect_server import client_env

    root = str(tmp_path)
    table = _table(root, servers, kinds=[HISTORY_DBT])
    state = os.path.join(root, "state")
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state, spark={"remote": connect_server.url}))
    for i, rows in enumerate([FIRST, SECOND]):  # deletes: tombstones
        sid = f"{i + 1}.parquet"
        _write(root, sid, rows, seed=i)
        done = subprocess.run([sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config",
                               config], cwd=root, env=client_env(root), capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert_replays(spark, table, state, sid)
    assert_once(table, state, servers, [HISTORY_DBT])
