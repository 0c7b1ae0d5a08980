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
    prev_df = None
    if first_load:
        previous = []
    else:
        prev_df = spark.createDataFrame(
            previous, T.StructType(key_fields + fp_fields + state_fields)
        )
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
