"""The sink contract with scoped snapshots, over every sink kind on one table (docs/scope.md).

1. Property: random sequences where each snapshot covers a random set of regions (or a
   rolling window over the snapshot's time): after each, every sink replayed from nothing is
   the oracle's image (in-scope missing keys deleted, out-of-scope keys kept with their values),
   the run's counts are the oracle's, ``verify`` (kept keys set apart) agrees, and the history
   is the image as of every version.
2. Kills: a real ``diffcdc run`` of a scoped snapshot dies like ``kill -9`` at every step and
   inside each sink's publishing; the next run finishes it, every sink holds the image and
   nothing was applied twice.
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
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.sources.snapshot_time import read_time
from diffcdc.state.store import TableState
from tests.support.config_text import table_toml
from tests.support.contract import CONTRACT_COMPACTION, KEYS, assert_replays
from tests.support.hypothesis_profiles import examples
from tests.support.scope_contract import (
    REGION,
    WINDOW,
    ScopedRun,
    assert_image,
    assert_once_scoped,
    scoped_sequences,
    window_sequences,
)
from tests.support.sink_kinds import KINDS
from tests.support.snapshots import snapshot_one
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow
STEPS = ["after_read", "after_state_staged", "after_changes_staged", "after_claim",
         "before_mark_published", "after_published"]


def _table(root: str, servers: dict[str, Any], scope: dict[str, Any],
           compaction: StateCompaction = CONTRACT_COMPACTION) -> TableConfig:
    return TableConfig(name="T", source=os.path.join(root, "source"), keys=list(KEYS),
                       sinks=[kind.entry(root, servers) for kind in KINDS],
                       state_compaction=compaction, scope=scope)


def _run_sequence(spark, servers, root: str, scope: dict[str, Any], snapshots: list[dict],
                  *, every: bool = True) -> None:
    """Each snapshot run through one table with a sink of every kind; after each (``every``;
    else after the last) every sink is the oracle's image and ``verify`` agrees."""
    table = _table(root, servers, scope)
    state = os.path.join(root, "state")
    run = ScopedRun(root, scope)
    for i, rows in enumerate(snapshots):
        sid = f"{i + 1:08d}.parquet"
        run.write(sid, rows, seed=i)
        (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
        head = TableState(state, "T").head().record
        expected = run.expect(result.version, rows, read_time(head.snapshot_time))
        got = {k: getattr(result, k) for k in expected}
        assert got == expected, sid
        assert run.images is not None
        if every or i == len(snapshots) - 1:
            assert_image(spark, table, state, run.images[result.version])
            assert_replays(spark, table, state, sid)  # verify: the snapshot plus kept keys
    assert run.images is not None
    assert_once_scoped(table, state, servers, KINDS, run.images)


@pytest.mark.default_tier
def test_scoped_snapshots_replay_in_every_sink_example(spark, servers, tmp_path):
    """One fixed sequence over every sink kind: a region kept, one deleted, one row moving."""
    first = snapshot_one(9)
    for i, row in enumerate(first.values()):
        row["s2"] = ["eu", "us", None][i % 3]  # eu: 0, 3, 6; us: 1, 4, 7; NULL: 2, 5, 8
    second = {k: dict(r) for k, r in first.items() if r["s2"] == "eu" and k != (3, "a")}
    second[(0, "a")]["s1"] = "changed"
    second[(1, "a")] = {**first[(1, "a")], "s2": "eu"}  # moves from us to eu
    second[(20, "b")] = {**first[(0, "a")], "s1": "new"}
    _run_sequence(spark, servers, str(tmp_path), REGION, [first, second], every=False)


@pytest.mark.parametrize("scope, sequences", [(REGION, scoped_sequences),
                                              (WINDOW, window_sequences)],
                         ids=["regions", "window"])
def test_scoped_snapshots_replay_in_every_sink(spark, servers, scope, sequences):
    @settings(max_examples=examples(2), deadline=None, suppress_health_check=list(HealthCheck))
    @given(snapshots=sequences())
    def body(snapshots):
        with tempfile.TemporaryDirectory() as root:
            _run_sequence(spark, servers, root, scope, snapshots)

    body()


#: Kill points of the full suite: the commit boundary and inside each kind of publishing (as
#: the contract's CORE_POINTS); every other point runs with ``pytest -m exhaustive``.
CORE_POINTS = ("after_claim", "publish@landing_local:1", "publish@landing_dfs:1",
               "delta_committed@history", "delta_committed@delta", "kafka_after_commit@kafka",
               "before_mark_published@kafka")


def _points() -> list[str]:
    points = list(STEPS)
    for kind in KINDS:
        points += [*kind.crash_points, f"before_mark_published@{kind.name}"]
    assert set(CORE_POINTS) <= set(points)
    return points


def test_a_scoped_run_killed_at_the_core_points_is_finished_exactly_once_in_every_sink(
        spark, servers, tmp_path):
    _kill_in_turn(spark, servers, str(tmp_path), list(CORE_POINTS))


@pytest.mark.exhaustive
def test_a_scoped_run_killed_anywhere_else_is_finished_exactly_once_in_every_sink(
        spark, servers, tmp_path):
    _kill_in_turn(spark, servers, str(tmp_path),
                  [p for p in _points() if p not in CORE_POINTS])


def _kill_in_turn(spark, servers, root: str, points: list[str]) -> None:
    """One table, one killed run per kill point in turn (each a new snapshot of one region: one
    of its keys gone, the others changed, three new; a version written as a delta or, every
    third, a base): after each, the next run finishes it
    and every sink holds the oracle's image; in the end nothing was applied twice."""
    table = _table(root, servers, REGION, StateCompaction(max_deltas=2))
    state = os.path.join(root, "state")
    run = ScopedRun(root, REGION)
    image = snapshot_one(12)
    for i, row in enumerate(image.values()):
        row["s2"] = ["eu", "us", "asia"][i % 3]
    run.write("00000001.parquet", image, seed=0)
    (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
    run.expect(result.version, image, None)
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state, fields={"scope": REGION}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    regions = ["eu", "us", "asia"]
    for n, point in enumerate(points, start=2):
        region = regions[n % 3]  # a snapshot of one region: one key of it gone, one changed
        assert run.image is not None
        rows = {k: dict(r) for k, r in run.image.items() if r["s2"] == region}
        gone = sorted(rows)[0] if len(rows) > 1 else None
        rows.pop(gone, None)
        for key in sorted(rows):  # enough changes for two landing files of 3 rows
            rows[key]["s1"] = f"p{n}"
        for extra in range(3):
            rows[(100 + n, f"n{extra}")] = {**next(iter(run.image.values())), "s2": region,
                                            "s1": f"new{n}"}
        sid = f"{n:08d}.parquet"
        run.write(sid, rows, seed=n)
        crashed = subprocess.run(
            [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config", config,
             "--master", "local[1]"],
            env={**env, "DIFFCDC_CRASH_AT": point}, capture_output=True, text=True, timeout=300,
            check=False,
        )
        assert crashed.returncode == 137, (point, crashed.stderr[-2000:])
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))  # finishes the job
        head = TableState(state, "T").head()
        assert head.snapshot_id == sid and head.published, point
        expected = run.expect(head.version, rows, None)
        assert head.record.counts.deleted == expected["deleted"], point
        assert head.record.counts.kept == expected["kept"], point
        assert run.images is not None
        assert_image(spark, table, state, run.images[head.version])
    assert run.images is not None
    assert_once_scoped(table, state, servers, KINDS, run.images)
