"""Classify changes between a snapshot and the previous state: pure DataFrame logic, no IO.

State rows are ``(key columns, fingerprint column(s), __diffcdc_change, __diffcdc_n)``. The
classified state of a run is the full outer join of the snapshot's ``(key, fingerprint)``
with the previous state's live rows, one row per key on either side, tagged with what happened
to it, and with the number of snapshot rows that had the key (1; 0 for a tombstone; more than
1 is a duplicate key, which the gate refuses, so it is never committed). A run writes it whole
(a base) or only its changes (a delta, :func:`delta_rows`; see :mod:`diffcdc.state.chain`):

=========  =====  ===================================================
change     value  meaning
=========  =====  ===================================================
UNCHANGED  0      key on both sides, same fingerprint
INSERT     1      key only in the snapshot
UPDATE     2      key on both sides, fingerprint differs
DELETE     3      key only in the previous state (a tombstone: in a base the next run
                  ignores it, in a delta it hides the key's rows in older links)
=========  =====  ===================================================

Keeping the tombstones in the version's state means the change set can be derived from the state
version alone (keys only: narrow), and the snapshot's full rows are read only for the keys
that were inserted or updated.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from diffcdc.core.sql import quote

CHANGE = "__diffcdc_change"
DUP = "__diffcdc_n"  # rows per key in the snapshot (>1 means a duplicate key)
_AT = "__diffcdc_at"  # a previous state row's position in its chain (newest wins)
#: Column names a snapshot may not use (lower case); plus anything starting with this prefix.
RESERVED_PREFIX = "__diffcdc"

UNCHANGED, INSERT, UPDATE, DELETE = 0, 1, 2, 3
#: The run's count of each change kind, by name.
_KIND_COUNTS = (("inserted", INSERT), ("updated", UPDATE), ("deleted", DELETE),
                ("unchanged", UNCHANGED))
#: The counts of a classified state, in the order :func:`state_metrics` gives them.
STATE_COUNTS = ("rows", *(name for name, _ in _KIND_COUNTS), "duplicate_keys", "null_keys")


def _c(name: str) -> Column:
    return F.col(quote(name))


def classify(
    snapshot_fp: DataFrame,
    previous: Sequence[DataFrame],
    keys: Sequence[str],
    fp_cols: Sequence[str],
    *,
    one_task: bool = False,
    stored: Sequence[str] = (),
) -> DataFrame:
    """The new state: one row per key with its fingerprint, CHANGE and DUP columns.

    ``stored`` (a re-fingerprint, :mod:`diffcdc.engine.recreate`): columns of ``snapshot_fp``,
    one per ``fp_cols``, with the fingerprints the new state keeps; ``fp_cols`` then hold those
    the snapshot is compared with (the previous state's rule).

    ``snapshot_fp`` holds at least the key and fingerprint columns of the snapshot;
    ``previous`` is the previous state as its chain of links, base first (see
    :mod:`diffcdc.state.chain`; empty for a first load): per key the newest link's row counts,
    and a key whose newest row is a tombstone is not in the previous state. Duplicate snapshot
    keys are collapsed to one row whose DUP column counts them, so the caller can refuse the
    snapshot without a second pass.

    The snapshot's ``(key, fingerprint)`` rows and the previous state's rows are put in one
    column layout (``new`` fingerprint, ``old`` fingerprint, one of them NULL), shuffled
    together by key and aggregated once: a single hash aggregate is the full outer join (with
    the chain resolved in it: ``max_by`` the link's position), the duplicate count and the
    classification, with no sort (a sort-merge join plus a separate duplicate aggregate cost
    more; see benchmarks/README.md). The rows are shuffled before they are aggregated because
    keys are (nearly) unique: the map-side partial aggregation Spark would otherwise plan only
    costs time. With ``one_task`` (inputs small enough for one task) they are put in one
    partition instead: a single partition already holds every row of a key, so Spark plans no
    shuffle and the classification and whatever consumes it run as one Spark job.

    The expressions are Spark SQL text, each parsed in one call to the JVM (see
    :mod:`diffcdc.core.sql` for why).
    """
    key_cols = [quote(k) for k in keys]
    new_fp = [f"{RESERVED_PREFIX}_new{c}" for c in fp_cols]
    old_fp = [f"{RESERVED_PREFIX}_old{c}" for c in fp_cols]
    chained = len(previous) > 1  # deltas on a base: the newest link of a key wins
    at = [f"CAST(NULL AS INT) AS {_AT}"] if chained else []
    # A first load has no old side: its old fingerprints are added as NULLs after the shuffle.
    carried_old = old_fp if previous else []
    store_fp = [f"{RESERVED_PREFIX}_store{c}" for c in fp_cols] if stored else []
    sides = snapshot_fp.selectExpr(
        *key_cols,
        *[f"{quote(c)} AS {n}" for c, n in zip(fp_cols, new_fp)],
        *[f"{quote(c)} AS {n}" for c, n in zip(stored, store_fp)],
        *[f"CAST(NULL AS BIGINT) AS {o}" for o in carried_old],
        *at,
        f"1 AS {DUP}",
    )
    for position, link in enumerate(previous):
        if position == 0:  # the base: its tombstones are keys gone before the chain started
            rows, old = link.filter(f"{CHANGE} != {DELETE}"), [quote(c) for c in fp_cols]
        else:  # a delta's tombstone hides the key's older rows: its old fingerprint is NULL
            rows = link
            old = [f"CASE WHEN {CHANGE} = {DELETE} THEN NULL ELSE {quote(c)} END" for c in fp_cols]
        sides = sides.unionByName(rows.selectExpr(
            *key_cols,
            *[f"CAST(NULL AS BIGINT) AS {n}" for n in (*new_fp, *store_fp)],
            *[f"{o} AS {n}" for o, n in zip(old, old_fp)],
            *([f"{position} AS {_AT}"] if chained else []),
            f"0 AS {DUP}",
        ))
    pick = "max_by({c}, " + _AT + ") AS {c}" if chained else "max({c}) AS {c}"
    grouped = (
        (sides.coalesce(1) if one_task else sides.repartition(*[_c(k) for k in keys]))
        .groupBy(*key_cols)
        .agg(
            *[F.expr(f"max({c}) AS {c}") for c in (*new_fp, *store_fp)],
            *[F.expr(pick.format(c=c)) for c in carried_old],
            F.expr(f"CAST(sum({DUP}) AS BIGINT) AS {DUP}"),
        )
    )
    if not previous:
        grouped = grouped.selectExpr("*", *[f"CAST(NULL AS BIGINT) AS {o}" for o in old_fp])
    if chained:  # a key deleted by a delta and not in the snapshot: in neither state
        grouped = grouped.filter(f"{DUP} > 0 OR {old_fp[0]} IS NOT NULL")
    same = " AND ".join(f"{n} = {o}" for n, o in zip(new_fp, old_fp))
    change = (
        f"CASE WHEN {old_fp[0]} IS NULL THEN {INSERT} WHEN NOT ({DUP} > 0) THEN {DELETE} "
        f"WHEN {same} THEN {UNCHANGED} ELSE {UPDATE} END"
    )
    return grouped.selectExpr(
        *key_cols,
        *[f"coalesce({n}, {o}) AS {c}" for c, n, o in zip(fp_cols, store_fp or new_fp, old_fp)],
        f"{change} AS {CHANGE}",
        DUP,
    )


def delta_rows(classified: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The rows of a classified state a delta keeps: every change, and every row the gate or
    the counts look at (a duplicate or NULL key), so that the rows left out are exactly the
    unchanged keys with one snapshot row each."""
    null_key = " OR ".join(f"{quote(k)} IS NULL" for k in keys)
    return classified.filter(f"{CHANGE} != {UNCHANGED} OR {DUP} != 1 OR {null_key}")


def delta_counts(delta: dict[str, int], previous_keys: int) -> dict[str, int]:
    """The counts of a whole classified state from those of its delta (:func:`delta_rows`)
    and the number of keys of the previous state: every previous key not in the delta is an
    unchanged key with one snapshot row."""
    in_delta = delta["updated"] + delta["deleted"] + delta["unchanged"]  # previous keys
    left_out = previous_keys - in_delta
    if left_out < 0:
        raise ValueError(f"the delta holds {in_delta} keys of a previous state of "
                         f"{previous_keys} keys")
    return {**delta, "rows": delta["rows"] + left_out, "unchanged": delta["unchanged"] + left_out}


def state_metrics(keys: Sequence[str]) -> list[Column]:
    """Aggregates over a classified state (the run's counts and key statistics)."""
    null_key = F.lit(False)
    for k in keys:
        null_key = null_key | _c(k).isNull()
    return [
        F.sum(_c(DUP)).cast("long").alias("rows"),
        *[_count_where(F.col(CHANGE) == value, name) for name, value in _KIND_COUNTS],
        _count_where(F.col(DUP) > 1, "duplicate_keys"),
        # rows, not keys: the NULL-key rows of a snapshot collapse into one state row
        F.sum(F.when(null_key, _c(DUP)).otherwise(0)).cast("long").alias("null_keys"),
    ]


def state_counts(parts: Iterable[pa.Table], keys: Sequence[str]) -> dict[str, int]:
    """:func:`state_metrics` over a classified state's files read as Arrow tables (a small
    state needs no Spark job); ``keys`` are the key columns' names as the state has them."""
    totals = dict.fromkeys(STATE_COUNTS, 0)
    for part in parts:
        change, dup = part.column(CHANGE), part.column(DUP)
        null_key = pa.repeat(False, part.num_rows)
        for k in keys:
            null_key = pc.or_(null_key, pc.is_null(part.column(k)))
        totals["rows"] += pc.sum(dup).as_py() or 0
        for name, value in _KIND_COUNTS:
            totals[name] += pc.sum(pc.equal(change, value)).as_py() or 0
        totals["duplicate_keys"] += pc.sum(pc.greater(dup, 1)).as_py() or 0
        totals["null_keys"] += pc.sum(pc.filter(dup, null_key)).as_py() or 0
    return totals


def _count_where(condition: Column, name: str) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long").alias(name)
