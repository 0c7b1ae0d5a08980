"""The neutral change set of one snapshot: pure DataFrame logic, no IO.

Rows carry every snapshot column with its exact type plus :data:`OP`
(insert, update, delete — the same values as the state's change kinds). Inserted and updated
rows are the snapshot's full rows, picked by joining only the changed keys back to the snapshot;
deletes come from the state alone and carry the key values with NULL in every other column.
No sink's format is decided here: markers, ordering and encodings belong to each sink.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from diffcdc.core.classify import CHANGE, DELETE, INSERT, UPDATE
from diffcdc.core.sql import quote

#: The operation column of a change set (int): the state's change kinds, one numbering.
OP = "__diffcdc_op"
OP_INSERT, OP_UPDATE, OP_DELETE = INSERT, UPDATE, DELETE


def change_frame(
    snapshot: DataFrame,
    state: DataFrame,
    keys: Sequence[str],
    columns: Sequence[str],
    *,
    broadcast_keys: bool,
    one_task: bool = False,
) -> DataFrame:
    """The diff between the previous state and the snapshot, from a classified state version.

    ``state`` is the new state version (key, fingerprint, change kind); ``columns`` the
    snapshot's columns in their order. ``broadcast_keys`` broadcasts the changed keys to pick
    the full rows (when they are few enough to fit in memory). With ``one_task`` (a snapshot
    and state small enough for one task) both sides of that join are put in one partition and
    hash-joined there: no shuffle, and no Spark job of its own to collect the keys for a
    broadcast. The expressions are Spark SQL
    text, each parsed in one call to the JVM (see :mod:`diffcdc.core.sql`).
    """
    key_cols, out = [quote(k) for k in keys], [*[quote(c) for c in columns], quote(OP)]
    changed = state.filter(f"{CHANGE} IN ({INSERT}, {UPDATE})").selectExpr(
        *key_cols, f"{CHANGE} AS {quote(OP)}"
    )
    if one_task:
        snapshot, changed = snapshot.coalesce(1), changed.coalesce(1).hint("shuffle_hash")
    elif broadcast_keys:
        changed = F.broadcast(changed)
    upserts = snapshot.join(changed, on=list(keys), how="inner").selectExpr(*out)
    # The other columns of a delete are NULLs of the snapshot's types (the union adds them).
    deletes = state.filter(f"{CHANGE} = {DELETE}").selectExpr(*key_cols, f"{OP_DELETE} AS {quote(OP)}")
    return deletes.unionByName(upserts, allowMissingColumns=True).selectExpr(*out)


def initial_frame(snapshot: DataFrame, columns: Sequence[str]) -> DataFrame:
    """Every snapshot row as an insert: a first load, or a full image for a new sink."""
    return snapshot.selectExpr(*[quote(c) for c in columns], f"{OP_INSERT} AS {quote(OP)}")
