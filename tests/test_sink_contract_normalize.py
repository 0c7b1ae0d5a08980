"""The sink contract with normalizers (issue 41.4), every sink kind on one table.

1. Property: random sequences of snapshots whose values are re-exported with noise the rules
   remove (padding, case, re-rounding, JSON spelling) or really change, under rules that
   start weaker or absent and coarsen along the way (each change a controlled re-fingerprint).
   Each version reports exactly the rows that changed under the rules of the version before
   it (no row counts as changed because a rule changed), and every sink replays the snapshot
   as compared through the rules.
2. Kills: a real ``diffcdc run`` dies like ``kill -9`` at every step of a version that adds
   normalizers to a table with a changes-only state (a re-fingerprint: noisy spellings kept,
   one real change); the rerun finishes it exactly once in every sink, the version counts
   the one real change, is a whole base, and the next version, every row respelled, changes
   nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffcdc.config import StateCompaction, TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.state.chain import state_chain
from diffcdc.state.store import TableState
from tests.support.config_text import table_toml
from tests.support.contract import assert_once, assert_replays
from tests.support.hypothesis_profiles import examples
from tests.support.normalized_rows import (
    BASES,
    KEYS,
    NOISE,
    RULE_SETS,
    RULES,
    expected_counts,
    normalized_kinds,
    snapshot_rows,
    write_snapshot,
)
from tests.support.sink_kinds import KINDS
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow
STEPS = ["after_read", "after_state_staged", "after_changes_staged", "after_claim",
         "before_mark_published", "after_published"]


def _table(root: str, servers: dict[str, Any], rules: dict[str, list[str]],
           compaction: StateCompaction) -> TableConfig:
    kinds = normalized_kinds(RULES)
    return TableConfig(name="T", source=os.path.join(root, "source"), keys=list(KEYS),
                       sinks=[kind.entry(root, servers) for kind in kinds],
                       state_compaction=compaction, normalize=rules)


PICK = st.tuples(*[st.tuples(st.integers(0, len(b) - 1), st.integers(0, NOISE - 1))
                   for b in BASES.values()])
SNAPSHOT = st.dictionaries(st.tuples(st.integers(0, 2), st.sampled_from(["a", "b"])), PICK,
                           min_size=1, max_size=6)


@st.composite
def sequences(draw):
    """(rule set index, snapshot picks) per snapshot: rules never step back; a snapshot is
    often the previous one respelled (noise only) or with one base changed."""
    steps = []
    rules = draw(st.integers(0, len(RULE_SETS) - 1))
    picks = draw(SNAPSHOT)
    for _ in range(draw(st.integers(2, 3))):
        steps.append((rules, picks))
        rules = draw(st.integers(rules, len(RULE_SETS) - 1))
        how = draw(st.sampled_from(["respell", "change", "new"]))
        if how == "new":
            picks = draw(SNAPSHOT)
        else:
            picks = {k: tuple((b, draw(st.integers(0, NOISE - 1))) for b, _ in v)
                     for k, v in picks.items()}
            if how == "change" and picks:
                key = draw(st.sampled_from(sorted(picks)))
                column = draw(st.integers(0, len(BASES) - 1))
                row = list(picks[key])
                row[column] = (row[column][0] + 1, row[column][1])
                picks[key] = tuple(row)
    return steps


def _check_steps(spark, servers, root: str, steps: list[tuple[int, dict]]) -> None:
    """Each step's snapshot run under its rules; counts, replays and each sink's check."""
    state = os.path.join(root, "state")
    before: list[dict] = []
    before_rules: dict[str, list[str]] = {}
    for i, (rules_at, picks) in enumerate(steps):
        rules = RULE_SETS[rules_at]
        table = _table(root, servers, rules, StateCompaction(max_deltas=2))
        rows = snapshot_rows(picks)
        sid = f"{i + 1:08d}.parquet"
        write_snapshot(root, sid, rows)
        (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
        got = {k: getattr(result, k) for k in ("inserted", "updated", "deleted")}
        assert got == expected_counts(before, rows, before_rules if i else rules), sid
        assert (result.refingerprinted is not None) == (i > 0 and rules != before_rules)
        assert_replays(spark, table, state, sid)
        before, before_rules = rows, rules
    assert_once(table, state, servers, normalized_kinds(before_rules))


def test_noise_the_rules_remove_is_never_published_and_real_changes_are(spark, servers):
    """Every sink kind on one table, random sequences (see the module docstring)."""
    @settings(max_examples=examples(2), deadline=None, suppress_health_check=list(HealthCheck))
    @given(steps=sequences())
    def body(steps):
        with tempfile.TemporaryDirectory() as root:
            _check_steps(spark, servers, root, steps)

    body()


@pytest.mark.default_tier
def test_respelled_rows_publish_nothing_and_a_real_change_is_published(spark, servers,
                                                                       tmp_path):
    """The default tier's example: every value respelled and one real change, every sink."""
    first = {(i % 3, "ab"[i % 2]): tuple((i, 0) for _ in BASES) for i in range(4)}
    second = {k: tuple((b + (k == (1, "b") and c == 3), 1 + (c + b) % 3)
                       for c, (b, _) in enumerate(v)) for k, v in first.items()}
    _check_steps(spark, servers, str(tmp_path), [(2, first), (2, second)])


def _rows(noise: int, changed: tuple[int, ...] = ()) -> list[dict]:
    """Six rows, every value spelled with noise (``noise`` picks how); ``changed``: the rows
    whose code (row 1) or amount (row 2) really changed."""
    return snapshot_rows({
        (i % 3, "ab"[i % 2]): ((i + (i == 1 and 1 in changed), 1 + (i + noise) % 3),
                               (i, 1 + (i + noise) % 3),
                               (i + (i == 2 and 2 in changed), 1 + (i + noise + 1) % 3),
                               (i, 1 + (i + noise + 2) % 3))
        for i in range(6)})


#: Noisy spellings; one real change; one more real change with the spellings kept (the version
#: that adds the rules: a fingerprint under the new rules compared with the stored ones would
#: take every respelled row for changed); every row respelled (nothing changes under the rules).
FIRST, SECOND, THIRD, FOURTH = _rows(0), _rows(0, (1,)), _rows(0, (1, 2)), _rows(1, (1, 2))


def _crash_points() -> list[Any]:
    points = list(STEPS)
    for kind in KINDS:
        points += list(kind.crash_points) + [f"before_mark_published@{kind.name}"]
    full = {"after_state_staged"}
    return [p if p in full else pytest.param(p, marks=pytest.mark.exhaustive) for p in points]


@pytest.mark.parametrize("point", _crash_points())
def test_a_re_fingerprint_killed_anywhere_is_finished_exactly_once(spark, servers, tmp_path,
                                                                  point):
    root = str(tmp_path)
    compaction = StateCompaction(max_delta_ratio=100.0)  # a delta unless the version refuses one
    plain = _table(root, servers, {}, compaction)
    state = os.path.join(root, "state")
    for i, rows in enumerate((FIRST, SECOND)):
        write_snapshot(root, f"{i + 1}.parquet", rows)
        run_table(spark, plain, state, RunOptions(quality=PERMISSIVE))
    assert [link.delta for link in state_chain(TableState(state, "T").commits())] == [False, True]
    table = _table(root, servers, RULES, compaction)
    write_snapshot(root, "3.parquet", THIRD)
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state, fields={"normalize": RULES}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["DIFFCDC_CRASH_AT"] = point
    crashed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config", config,
         "--master", "local[1]"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))  # the rerun finishes it
    tstate = TableState(state, "T")
    head = tstate.head()
    assert head.snapshot_id == "3.parquet" and head.published
    assert (head.record.counts.updated, head.record.counts.inserted,
            head.record.counts.deleted) == (1, 0, 0)  # the real change only
    assert head.record.state_parent is None and head.record.normalize.to_record() == {
        c: RULES[c] for c in sorted(RULES)}
    assert_replays(spark, table, state, "3.parquet")
    assert_once(table, state, servers, normalized_kinds(RULES))
    write_snapshot(root, "4.parquet", FOURTH)
    (result,) = run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).snapshots
    assert (result.inserted, result.updated, result.deleted, result.refingerprinted) == (
        0, 0, 0, None)
    assert TableState(state, "T").head().record.state_parent == 3  # a delta on the new base
    assert_replays(spark, table, state, "4.parquet")
