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
KEPT       4      key only in the previous state, outside the snapshot's scope: it stays
                  live (fingerprint and scope values carried), never published as a change
=========  =====  ===================================================

A scoped table (:mod:`diffcdc.core.scope`) adds the scope's values to its state rows
(``__diffcdc_scoped``, ``__diffcdc_scope0`` ...), so the classification decides from the state
alone whether a key the snapshot does not hold is deleted or kept; a delta of a scoped table
holds its kept keys too (the counts stay exact: every key a delta leaves out is unchanged with
one snapshot row) and the unchanged keys whose scope values moved.

Keeping the tombstones in the version's state means the change set can be derived from the state
version alone (keys only: narrow), and the snapshot's full rows are read only for the keys
that were inserted or updated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from diffcdc.core.scope import SCOPED, SLOT_PREFIX, ScopeSlots, enclosed
from diffcdc.core.sql import quote

CHANGE = "__diffcdc_change"
DUP = "__diffcdc_n"  # rows per key in the snapshot (>1 means a duplicate key)
_AT = "__diffcdc_at"  # a previous state row's position in its chain (newest wins)
#: Column names a snapshot may not use (lower case); plus anything starting with this prefix.
RESERVED_PREFIX = "__diffcdc"

UNCHANGED, INSERT, UPDATE, DELETE, KEPT = 0, 1, 2, 3, 4
#: The run's count of each change kind, by name.
_KIND_COUNTS = (("inserted", INSERT), ("updated", UPDATE), ("deleted", DELETE),
                ("unchanged", UNCHANGED), ("kept", KEPT))
#: The counts of a classified state, in the order :func:`state_metrics` gives them.
STATE_COUNTS = ("rows", *(name for name, _ in _KIND_COUNTS), "duplicate_keys", "null_keys")
#: A scoped state's count of kept keys whose scope values are not known.
UNKNOWN_SCOPE = "unknown_scope"
#: A classified scoped state's column (dropped before it is written): an unchanged key whose
#: scope values the previous state did not have as they are now (a delta keeps its row).
MOVED = "__diffcdc_moved"


@dataclass(frozen=True)
class ClassifyScope:
    """The scope of one classification: this version's slots (the snapshot side carries them,
    ``__diffcdc_scope<i>``), the previous state's stored columns (None: its rows hold no scope
    values) and each stored column's Spark SQL type; ``compared``: per column of
    ``slots.columns`` that has normalizers, its value as they make it (an SQL expression of
    the value's): the snapshot's tuples and a key's stored values are compared through them,
    as its fingerprint is (``'EU '`` and ``'EU'`` are one region under ``trim``)."""

    slots: ScopeSlots
    previous: tuple[str, ...] | None
    types: Mapping[str, str]
    compared: Mapping[str, Callable[[str], str]] = field(default_factory=dict)


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
    scope: ClassifyScope | None = None,
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

    With ``scope`` the snapshot side also holds the slots of ``scope.slots`` and the result
    has the scope columns and :data:`MOVED` (see :func:`_scoped`).
    """
    key_cols = [quote(k) for k in keys]
    new_fp = [f"{RESERVED_PREFIX}_new{c}" for c in fp_cols]
    old_fp = [f"{RESERVED_PREFIX}_old{c}" for c in fp_cols]
    chained = len(previous) > 1  # deltas on a base: the newest link of a key wins
    at = [f"CAST(NULL AS INT) AS {_AT}"] if chained else []
    # A first load has no old side: its old fingerprints are added as NULLs after the shuffle.
    carried_old = old_fp if previous else []
    store_fp = [f"{RESERVED_PREFIX}_store{c}" for c in fp_cols] if stored else []
    sc = _ScopeSides(scope, keys) if scope is not None else None
    if sc is not None:
        carried_old = old_fp
    sides = snapshot_fp.selectExpr(
        *key_cols,
        *[f"{quote(c)} AS {n}" for c, n in zip(fp_cols, new_fp)],
        *[f"{quote(c)} AS {n}" for c, n in zip(stored, store_fp)],
        *[f"CAST(NULL AS BIGINT) AS {o}" for o in carried_old],
        *at,
        f"1 AS {DUP}",
        *(sc.snapshot_side() if sc is not None else []),
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
            *(sc.state_side() if sc is not None else []),
        ))
    pick = "max_by({c}, " + _AT + ") AS {c}" if chained else "max({c}) AS {c}"
    grouped = (
        (sides.coalesce(1) if one_task else sides.repartition(*[_c(k) for k in keys]))
        .groupBy(*key_cols)
        .agg(
            *[F.expr(f"max({c}) AS {c}") for c in (*new_fp, *store_fp)],
            *[F.expr(pick.format(c=c)) for c in carried_old],
            F.expr(f"CAST(sum({DUP}) AS BIGINT) AS {DUP}"),
            *(F.expr(e) for e in (sc.aggregates(chained) if sc is not None else [])),
        )
    )
    if sc is not None:
        return _scoped(grouped, snapshot_fp, sc, key_cols, fp_cols, new_fp, old_fp, chained,
                       store_fp)
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


def _scoped(
    grouped: DataFrame, snapshot_fp: DataFrame, sc: _ScopeSides, key_cols: Sequence[str],
    fp_cols: Sequence[str], new_fp: Sequence[str], old_fp: Sequence[str], chained: bool,
    store_fp: Sequence[str] = (),
) -> DataFrame:
    """The classified rows of a scoped table: a key only in the previous state is deleted when
    its stored scope values are known and in the snapshot's scope, kept otherwise
    (``store_fp``: a re-fingerprint's new fingerprints, kept instead of ``new_fp``)."""
    hit = "TRUE"
    if sc.slots.columns:  # the tuples of the scope columns the snapshot holds (NULL-safe)
        tuples = snapshot_fp.selectExpr(
            *[f"{sc.compared(c, sc.new_value(c))} AS {_TUPLE}{i}"
              for i, c in enumerate(sc.slots.columns)]
        ).distinct().selectExpr("*", f"TRUE AS {_HIT}")
        on = " AND ".join(f"{sc.compared(c, sc.old_value(c))} <=> {_TUPLE}{i}"
                          for i, c in enumerate(sc.slots.columns))
        grouped = grouped.join(F.broadcast(tuples), on=F.expr(on), how="left")
        hit = f"{_HIT} IS NOT NULL"
    inwhere = "TRUE"
    if sc.slots.where is not None:  # the predicate over the values the key had
        aliased = [f"{o} AS {quote(c)}" for o, c in zip(sc.old, sc.slots.stored)]
        test = f"coalesce({enclosed(sc.slots.where)}, FALSE) AS {_INWHERE}"
        kept_columns = [quote(c) for c in grouped.columns]
        grouped = grouped.selectExpr("*", *aliased).selectExpr(*kept_columns, test)
        inwhere = _INWHERE
    known = sc.known()
    in_scope = f"({known}) AND ({hit}) AND ({inwhere})"
    same = " AND ".join(f"{n} = {o}" for n, o in zip(new_fp, old_fp))
    change = (
        f"CASE WHEN {old_fp[0]} IS NULL THEN {INSERT} WHEN NOT ({DUP} > 0) THEN "
        f"(CASE WHEN {in_scope} THEN {DELETE} ELSE {KEPT} END) "
        f"WHEN {same} THEN {UNCHANGED} ELSE {UPDATE} END"
    )
    still = " AND ".join([f"({known})", *(f"{n} <=> {o}" for n, o in zip(sc.new, sc.old))])
    if chained:  # a key deleted by a delta and not in the snapshot: in neither state
        grouped = grouped.filter(f"{DUP} > 0 OR {old_fp[0]} IS NOT NULL")
    # A re-fingerprint has no row of a kept key to hash under the new rule: the fingerprint
    # it keeps (the old rule's) is replaced by one no row has under the new rule, so the key's
    # next row counts as updated (published as it is) rather than compared across two rules,
    # which hid a change the new rule sees (a rule removed: 'X' then 'x' under casefold).
    carried = [f"xxhash64({o})" if store_fp else o for o in old_fp]
    return grouped.selectExpr(
        *key_cols,
        *[f"coalesce({n}, {o}) AS {c}" for c, n, o in zip(fp_cols, store_fp or new_fp, carried)],
        f"{change} AS {CHANGE}",
        DUP,
        f"CASE WHEN {DUP} > 0 THEN TRUE ELSE ({known}) END AS {SCOPED}",
        *[f"CASE WHEN {DUP} > 0 THEN {n} ELSE {o} END AS {sc.slots.slot(c)}"
          for n, o, c in zip(sc.new, sc.old, sc.slots.stored)],
        # an unchanged key whose scope values moved, or that the previous state kept: its
        # newest row must say what it is now
        f"(NOT ({still}) OR coalesce({sc.was_kept}, FALSE)) AS {MOVED}",
    )


_TUPLE = f"{RESERVED_PREFIX}_tuple"
_HIT = f"{RESERVED_PREFIX}_hit"
_INWHERE = f"{RESERVED_PREFIX}_inwhere"


class _ScopeSides:
    """The scope's columns on both sides of :func:`classify`'s aggregate."""

    def __init__(self, scope: ClassifyScope, keys: Sequence[str]) -> None:
        self.scope, self.slots = scope, scope.slots
        self.keys = {k.lower(): k for k in keys}
        stored = self.slots.stored
        self.new = [f"{RESERVED_PREFIX}_news{i}" for i in range(len(stored))]
        self.old = [f"{RESERVED_PREFIX}_olds{i}" for i in range(len(stored))]
        self.flag = f"{RESERVED_PREFIX}_oldscoped"
        self.was_kept = f"{RESERVED_PREFIX}_oldkept"
        before = {c.lower(): i for i, c in enumerate(scope.previous or ())}
        #: Per stored column, the previous state's slot holding it (None: not kept there).
        self.before = [before.get(c.lower()) for c in stored]

    def _type(self, column: str) -> str:
        return self.scope.types[column]

    def snapshot_side(self) -> list[str]:
        stored = self.slots.stored
        return [
            *[f"{quote(self.slots.slot(c))} AS {n}" for c, n in zip(stored, self.new)],
            *[f"CAST(NULL AS {self._type(c)}) AS {o}" for c, o in zip(stored, self.old)],
            f"CAST(NULL AS BOOLEAN) AS {self.flag}",
            f"CAST(NULL AS BOOLEAN) AS {self.was_kept}",
        ]

    def state_side(self) -> list[str]:
        stored = self.slots.stored
        old = [f"CAST({quote(f'{SLOT_PREFIX}{j}')} AS {self._type(c)})" if j is not None
               else f"CAST(NULL AS {self._type(c)})" for c, j in zip(stored, self.before)]
        flag = quote(SCOPED) if self.scope.previous is not None else "CAST(NULL AS BOOLEAN)"
        return [
            *[f"CAST(NULL AS {self._type(c)}) AS {n}" for c, n in zip(stored, self.new)],
            *[f"{e} AS {o}" for e, o in zip(old, self.old)],
            f"{flag} AS {self.flag}",
            f"{CHANGE} = {KEPT} AS {self.was_kept}",
        ]

    def aggregates(self, chained: bool) -> list[str]:
        # one snapshot row per key (a duplicate is refused by the gate), one previous row per
        # key per link: the one value that is there
        new = [f"first({n}, TRUE) AS {n}" for n in self.new]
        if chained:
            old = [f"max_by({o}, {_AT}) AS {o}" for o in [*self.old, self.flag, self.was_kept]]
        else:
            old = [f"first({o}, TRUE) AS {o}" for o in [*self.old, self.flag, self.was_kept]]
        return [*new, *old]

    def known(self) -> str:
        """Whether the previous state knows a key's scope values (a scope over key columns
        only always does)."""
        if not self.slots.stored:
            return "TRUE"
        if any(j is None for j in self.before):
            return "FALSE"
        return f"coalesce({self.flag}, FALSE)"

    def compared(self, column: str, value: str) -> str:
        """``value`` (an expression of ``column``'s) as the column's normalizers make it."""
        normalized = self.scope.compared.get(column)
        return normalized(value) if normalized is not None else value

    def new_value(self, column: str) -> str:
        """The snapshot's value of ``column`` on the snapshot side (a key or a slot)."""
        key = self.keys.get(column.lower())
        return quote(key) if key is not None else quote(self.slots.slot(column))

    def old_value(self, column: str) -> str:
        """The previous state's value of ``column`` after the aggregate."""
        key = self.keys.get(column.lower())
        return quote(key) if key is not None else self.old[self.slots.stored.index(column)]


def delta_rows(classified: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The rows of a classified state a delta keeps: every change, and every row the gate or
    the counts look at (a duplicate or NULL key), so that the rows left out are exactly the
    unchanged keys with one snapshot row each. A scoped state's delta also keeps its kept keys
    (not UNCHANGED) and the unchanged keys whose scope values moved (:data:`MOVED`)."""
    null_key = " OR ".join(f"{quote(k)} IS NULL" for k in keys)
    moved = f" OR {MOVED}" if MOVED in classified.columns else ""
    return classified.filter(f"{CHANGE} != {UNCHANGED} OR {DUP} != 1 OR {null_key}{moved}")


def delta_counts(delta: dict[str, int], previous_keys: int) -> dict[str, int]:
    """The counts of a whole classified state from those of its delta (:func:`delta_rows`)
    and the number of keys of the previous state: every previous key not in the delta is an
    unchanged key with one snapshot row."""
    in_delta = (delta["updated"] + delta["deleted"] + delta["unchanged"]
                + delta.get("kept", 0))  # previous keys
    left_out = previous_keys - in_delta
    if left_out < 0:
        raise ValueError(f"the delta holds {in_delta} keys of a previous state of "
                         f"{previous_keys} keys")
    return {**delta, "rows": delta["rows"] + left_out, "unchanged": delta["unchanged"] + left_out}


def state_metrics(keys: Sequence[str], *, scoped: bool = False) -> list[Column]:
    """Aggregates over a classified state (the run's counts and key statistics; ``scoped``: a
    scoped state's, with :data:`UNKNOWN_SCOPE`)."""
    null_key = F.lit(False)
    for k in keys:
        null_key = null_key | _c(k).isNull()
    return [
        F.sum(_c(DUP)).cast("long").alias("rows"),
        *[_count_where(F.col(CHANGE) == value, name) for name, value in _KIND_COUNTS],
        _count_where(F.col(DUP) > 1, "duplicate_keys"),
        # rows, not keys: the NULL-key rows of a snapshot collapse into one state row
        F.sum(F.when(null_key, _c(DUP)).otherwise(0)).cast("long").alias("null_keys"),
        *([_count_where((F.col(CHANGE) == KEPT) & ~F.coalesce(_c(SCOPED), F.lit(False)),
                        UNKNOWN_SCOPE)] if scoped else []),
    ]


def state_counts(parts: Iterable[pa.Table], keys: Sequence[str]) -> dict[str, int]:
    """:func:`state_metrics` over a classified state's files read as Arrow tables (a small
    state needs no Spark job); ``keys`` are the key columns' names as the state has them."""
    totals = dict.fromkeys(STATE_COUNTS, 0)
    for part in parts:
        if SCOPED in part.column_names:
            known = pc.fill_null(part.column(SCOPED), False)
            unknown = pc.and_(pc.equal(part.column(CHANGE), KEPT), pc.invert(known))
            totals[UNKNOWN_SCOPE] = totals.get(UNKNOWN_SCOPE, 0) + (pc.sum(unknown).as_py() or 0)
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
