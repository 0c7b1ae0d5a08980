"""diff.classify against a plain-Python model: every kind of key, both fingerprint widths.

The property replay tests check whole runs; this pins the state rows themselves (change kind,
fingerprint carried, per-key snapshot row count) for the cases the one-aggregate plan must keep
apart: a tombstone in the previous state, a key re-inserted after its delete, duplicate keys
(with and without a previous row), NULL and composite keys.
"""

from __future__ import annotations

import glob

import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as T

from diffcdc.core.classify import (
    CHANGE,
    DELETE,
    DUP,
    INSERT,
    UNCHANGED,
    UPDATE,
    classify,
    delta_counts,
    delta_rows,
    state_counts,
    state_metrics,
)
from diffcdc.core.fingerprint import FP, FP_HI

KEYS = ["k1", "k2"]


def _model(snapshot, previous, width):
    """Expected state rows: {key: (fingerprint tuple, change, rows with that key)}."""
    live = {r[:2]: r[2 : 2 + width] for r in previous if r[2 + width] != DELETE}
    seen: dict = {}
    for r in snapshot:
        fps, n = seen.get(r[:2], (tuple(r[2:]), 0))
        # duplicates keep each fingerprint column's maximum (the gate refuses them anyway)
        seen[r[:2]] = (tuple(max(a, b) for a, b in zip(fps, r[2:])), n + 1)
    out = {}
    for key, (fps, n) in seen.items():
        old = live.get(key)
        change = INSERT if old is None else (UNCHANGED if tuple(old) == fps else UPDATE)
        out[key] = (fps, change, n)
    for key, old in live.items():
        if key not in seen:
            out[key] = (tuple(old), DELETE, 0)
    return out


@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("first_load", [False, True])
def test_classify_matches_the_model(spark, tmp_path, width, first_load):
    fp_cols = [FP, FP_HI][:width]
    key_fields = [T.StructField("k1", T.StringType()), T.StructField("k2", T.IntegerType())]
    fp_fields = [T.StructField(c, T.LongType(), False) for c in fp_cols]
    state_fields = [T.StructField(CHANGE, T.IntegerType()), T.StructField(DUP, T.LongType())]

    def fps(*values):
        return tuple(values[:width])

    previous = [
        ("a", 1, *fps(10, 110), UNCHANGED, 1),  # unchanged
        ("a", 2, *fps(20, 120), INSERT, 1),  # updated (fingerprint differs)
        ("b", 1, *fps(30, 130), UPDATE, 1),  # deleted now
        ("b", 2, *fps(40, 140), DELETE, 0),  # tombstone: re-inserted now, so an INSERT
        ("c", 1, *fps(50, 150), UNCHANGED, 1),  # duplicated now
        ("c", 2, *fps(60, 160), DELETE, 0),  # tombstone, still absent: gone from the state
    ]
    snapshot = [
        ("a", 1, *fps(10, 110)),
        ("a", 2, *fps(21, 120)),
        ("b", 2, *fps(40, 140)),
        ("c", 1, *fps(50, 150)),
        ("c", 1, *fps(51, 151)),
        ("d", 1, *fps(70, 170)),  # new key
        ("d", 2, *fps(80, 180)),  # new key, three times
        ("d", 2, *fps(81, 181)),
        ("d", 2, *fps(79, 179)),
        (None, 3, *fps(90, 190)),  # NULL in one key column, twice
        (None, 3, *fps(91, 191)),
        ("e", None, *fps(95, 195)),
    ]
    prev_df = []
    if first_load:
        previous = []
    else:
        prev_df = [spark.createDataFrame(
            previous, T.StructType(key_fields + fp_fields + state_fields)
        )]
    snap_df = spark.createDataFrame(snapshot, T.StructType(key_fields + fp_fields))

    got_rows = classify(snap_df, prev_df, KEYS, fp_cols).collect()
    got = {
        (r["k1"], r["k2"]): (tuple(r[c] for c in fp_cols), r[CHANGE], r[DUP]) for r in got_rows
    }
    assert len(got_rows) == len(got)  # one state row per key
    assert got == _model(snapshot, previous, width)
    assert [f.name for f in classify(snap_df, prev_df, KEYS, fp_cols).schema.fields] == [
        *KEYS, *fp_cols, CHANGE, DUP
    ]

    # The run's counts, by Spark and from the state's files read with Arrow, agree.
    folder = str(tmp_path / "state")
    classify(snap_df, prev_df, KEYS, fp_cols).repartition(3).write.parquet(folder)
    (by_spark,) = spark.read.parquet(folder).agg(*state_metrics(KEYS)).collect()
    parts = [pq.read_table(p) for p in sorted(glob.glob(f"{folder}/*.parquet"))]
    counts = state_counts(parts, KEYS)
    assert counts == {k: int(v or 0) for k, v in by_spark.asDict().items()}
    assert counts["duplicate_keys"] == 3 and counts["null_keys"] == 3 and counts["rows"] == 12


def _resolve(links, width):
    """The model of a chain: per key the newest link's row; a tombstone there hides the key."""
    newest: dict = {}
    for rows in links:
        for r in rows:
            newest[r[:2]] = r
    return [r for r in newest.values() if r[2 + width] != DELETE]


@pytest.mark.parametrize("width", [1, 2])
def test_classify_over_a_chain_matches_the_model(spark, tmp_path, width):
    """A base and two deltas: the newest link of a key wins, a delta's tombstone hides the key
    in older links, a key re-inserted by a later delta is back; the delta written of the result
    counts, with the previous keys, what the whole state counts."""
    fp_cols = [FP, FP_HI][:width]
    schema = T.StructType([T.StructField("k1", T.StringType()), T.StructField("k2", T.IntegerType()),
                           *[T.StructField(c, T.LongType(), False) for c in fp_cols],
                           T.StructField(CHANGE, T.IntegerType()), T.StructField(DUP, T.LongType())])

    def row(k1, k2, fp, change, n=1):
        return (k1, k2, *(fp, fp + 100)[:width], change, n)

    base = [row("a", 1, 10, INSERT), row("a", 2, 20, INSERT), row("b", 1, 30, UNCHANGED),
            row("b", 2, 40, INSERT), row("z", 9, 99, DELETE, 0)]  # a base's own tombstone
    delta1 = [row("a", 2, 21, UPDATE), row("b", 1, 30, DELETE, 0), row("c", 1, 50, INSERT)]
    delta2 = [row("b", 1, 31, INSERT), row("c", 1, 50, DELETE, 0), row("a", 1, 11, UPDATE)]
    links = [base, delta1, delta2]
    snapshot = [("a", 1, *(11, 111)[:width]),  # unchanged since delta2
                ("a", 2, *(22, 122)[:width]),  # updated again
                ("b", 1, *(31, 131)[:width]),  # unchanged, re-inserted by delta2
                ("c", 1, *(50, 150)[:width]),  # deleted by delta2: an insert now
                ("e", 1, *(70, 170)[:width])]  # new
    snap_fields = [*schema.fields[:2], *schema.fields[2 : 2 + width]]
    snap_df = spark.createDataFrame(snapshot, T.StructType(snap_fields))
    link_dfs = [spark.createDataFrame(rows, schema) for rows in links]
    got_rows = classify(snap_df, link_dfs, KEYS, fp_cols).collect()
    got = {(r["k1"], r["k2"]): (tuple(r[c] for c in fp_cols), r[CHANGE], r[DUP]) for r in got_rows}
    assert len(got_rows) == len(got)
    previous = _resolve(links, width)
    assert got == _model(snapshot, previous, width)
    assert got[("b", 2)][1] == DELETE and ("z", 9) not in got  # gone before the chain

    whole = str(tmp_path / "whole")
    delta = str(tmp_path / "delta")
    classify(snap_df, link_dfs, KEYS, fp_cols).write.parquet(whole)
    delta_rows(classify(snap_df, link_dfs, KEYS, fp_cols), KEYS).write.parquet(delta)
    counts = {f: state_counts([pq.read_table(p) for p in sorted(glob.glob(f"{f}/*.parquet"))], KEYS)
              for f in (whole, delta)}
    assert pq.read_table(delta).num_rows == len(got) - 2  # ("a", 1), ("b", 1) left out
    assert delta_counts(counts[delta], len(previous)) == counts[whole]
    with pytest.raises(ValueError, match="previous state"):
        delta_counts(counts[delta], 1)
