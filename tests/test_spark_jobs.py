"""The Spark jobs of a small table's run: how many a steady run makes (pinned, so that a job
added back fails here), and that what saves the others reads and diffs exactly as before: the
snapshot's schema from its footer, and a small table classified and diffed in one task."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as T

from diffcdc.config import RunConfig, TableConfig
from diffcdc.core.changeset import change_frame
from diffcdc.core.classify import CHANGE, DELETE, DUP, INSERT, UNCHANGED, UPDATE, classify
from diffcdc.core.fingerprint import FP
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.run import run_many
from diffcdc.sources.files import SnapshotEntry, check_parquet_footers, read_snapshot
from tests.support.snapshots import snapshot_one, snapshot_table, snapshot_two, write_snapshot

#: The Spark jobs of a steady run of a small table with a landing sink: the state's classify
#: and write, and the landing file's sort and write (its partitions merged where they are, no
#: shuffle). The counts, the state manifest and the landing files' facts are read in this
#: process; the snapshot's schema comes from its footer; the changed rows are picked in the
#: classify's one task.
STEADY_SMALL_TABLE_JOBS = 2


def _jobs_started(spark) -> int:
    """The newest job id + 1 (Spark keeps the newest 1000 jobs' ids: their count stalls)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1


def test_a_steady_small_table_run_makes_few_spark_jobs(spark, tmp_path):
    source = str(tmp_path / "source")
    table = TableConfig(name="t", source=source, keys=["k1", "k2"],
                        landing=str(tmp_path / "landing"))
    quality = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None)
    config = RunConfig(state=str(tmp_path / "state"), tables=[table], quality=quality,
                       parallelism=1)
    write_snapshot(source, "snap-001.parquet", snapshot_one(), seed=1)
    (first,) = run_many(spark, config)
    assert first.error is None
    jobs = []
    for n, rows in enumerate([snapshot_two(), snapshot_one(), snapshot_two()], start=2):
        write_snapshot(source, f"snap-{n:03d}.parquet", rows, seed=n)
        before = _jobs_started(spark)
        (report,) = run_many(spark, config)
        assert report.error is None
        jobs.append(_jobs_started(spark) - before)
    assert jobs == [STEADY_SMALL_TABLE_JOBS] * 3


def _types_table() -> pa.Table:
    """A column of every kind a snapshot may have, as Arrow (not Spark) writes them."""
    ts = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
    columns = {
        "i8": pa.array([1, None], pa.int8()), "u8": pa.array([1, 2], pa.uint8()),
        "u16": pa.array([1, 2], pa.uint16()), "u32": pa.array([1, 2], pa.uint32()),
        "u64": pa.array([1, 2], pa.uint64()), "i64": pa.array([1, 2], pa.int64()),
        "f32": pa.array([1.5, None], pa.float32()), "f64": pa.array([1.5, 2.5], pa.float64()),
        "dec": pa.array([Decimal("1.25"), None], pa.decimal128(18, 2)),
        "big": pa.array([Decimal("1.25"), None], pa.decimal128(38, 10)),
        "s": pa.array(["a", None], pa.string()), "ls": pa.array(["a", "b"], pa.large_string()),
        "dict": pa.array(["a", "a"]).dictionary_encode(), "bin": pa.array([b"x", None]),
        "flag": pa.array([True, None]), "day": pa.array([dt.date(2026, 1, 2), None]),
        "ts_ms": pa.array([ts, None], pa.timestamp("ms", tz="UTC")),
        "ts_us": pa.array([ts, None], pa.timestamp("us", tz="UTC")),
        "ts_local": pa.array([ts, None], pa.timestamp("us")),
        "lst": pa.array([[1, None], None], pa.list_(pa.int32())),
        "st": pa.array([{"a": 1, "b": "x"}, None]),
        "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
    }
    return pa.table(columns)


def _entry(path: str) -> SnapshotEntry:
    return SnapshotEntry(os.path.basename(path), path, "parquet")


@pytest.mark.parametrize("ns", [False, True], ids=["us", "ns-as-int96"])
def test_a_snapshots_schema_from_its_footer_is_sparks_own(spark, tmp_path, ns):
    """Read with the footer's schema (no job), a snapshot has the schema and rows Spark
    infers itself: an Arrow-written file of every type, a Spark-written folder and a folder
    of Arrow-written parts."""
    arrow_file = str(tmp_path / "arrow.parquet")
    pq.write_table(_types_table(), arrow_file, use_deprecated_int96_timestamps=ns)
    spark_folder = str(tmp_path / "spark")
    spark.read.parquet(arrow_file).write.parquet(spark_folder)
    folder = tmp_path / "parts"
    os.makedirs(folder)
    for part in (1, 2):  # one schema, the columns in one order
        pq.write_table(snapshot_table(snapshot_one(5), seed=1), str(folder / f"part-{part}.parquet"))
    for path in (arrow_file, spark_folder, str(folder)):
        assert check_parquet_footers(_entry(path), "t") is not None
        before = _jobs_started(spark)
        df = read_snapshot(spark, _entry(path), "t")
        schema = df.schema
        assert _jobs_started(spark) == before  # the schema took no job
        inferred = spark.read.parquet(path)
        assert schema == inferred.schema
        assert sorted(map(str, df.collect())) == sorted(map(str, inferred.collect()))


def test_files_of_different_schemas_or_a_summary_file_leave_the_schema_to_spark(spark, tmp_path):
    folder = tmp_path / "mixed"
    os.makedirs(folder)
    pq.write_table(pa.table({"id": [1], "a": ["x"]}), str(folder / "part-0.parquet"))
    pq.write_table(pa.table({"id": [2], "b": [1.5]}), str(folder / "part-1.parquet"))
    assert check_parquet_footers(_entry(str(folder)), "t") is None
    df = read_snapshot(spark, _entry(str(folder)), "t")
    assert df.schema == spark.read.parquet(str(folder)).schema

    summarised = tmp_path / "summarised"
    os.makedirs(summarised)
    pq.write_table(pa.table({"id": [1]}), str(summarised / "part-0.parquet"))
    pq.write_metadata(pa.schema([("id", pa.int64())]), str(summarised / "_common_metadata"))
    assert check_parquet_footers(_entry(str(summarised)), "t") is None


def test_partition_folders_leave_the_schema_to_spark(tmp_path):
    """``day=...`` folders whose files also hold ``day`` as a string: Spark's partition
    discovery types it from the folder names, and a schema given to the reader would move and
    retype it, so no footer stands for the snapshot's schema."""
    folder = tmp_path / "partitioned"
    for day in ("2026-01-01", "2026-01-02"):
        os.makedirs(folder / f"day={day}")
        pq.write_table(pa.table({"id": [1, 2], "day": [day, day], "v": ["a", "b"]}),
                       str(folder / f"day={day}" / "part-0.parquet"))
    assert check_parquet_footers(_entry(str(folder)), "t") is None


_STATE = T.StructType([T.StructField("k", T.StringType()), T.StructField(FP, T.LongType()),
                       T.StructField(CHANGE, T.IntegerType()), T.StructField(DUP, T.LongType())])


def test_one_task_classifies_and_diffs_as_the_shuffle_does(spark):
    """Over a chain (a base and a delta), duplicate and NULL keys and every change kind, the
    one-task classification and change set equal the shuffled and broadcast ones."""
    base = [("a", 1, INSERT, 1), ("b", 2, INSERT, 1), ("c", 3, UNCHANGED, 1),
            ("d", 4, INSERT, 1), ("z", 9, DELETE, 0)]
    delta = [("b", 22, UPDATE, 1), ("c", 3, DELETE, 0), ("e", 5, INSERT, 1)]
    links = [spark.createDataFrame(rows, _STATE) for rows in (base, delta)]
    snapshot = spark.createDataFrame(
        [("a", 1, "same"), ("b", 23, "changed"), ("c", 3, "back"), ("f", 6, "new"),
         ("f", 7, "dup"), (None, 8, "null key"), ("e", 5, "same")],
        T.StructType([T.StructField("k", T.StringType()), T.StructField(FP, T.LongType()),
                      T.StructField("v", T.StringType())]))
    narrow = snapshot.select("k", FP)
    for previous in ([], links[:1], links):
        one = classify(narrow, previous, ["k"], [FP], one_task=True)
        shuffled = classify(narrow, previous, ["k"], [FP])
        assert sorted(map(tuple, one.collect()), key=str) == \
            sorted(map(tuple, shuffled.collect()), key=str)
        full = snapshot.drop(FP)
        picked = change_frame(full, one, ["k"], full.columns, broadcast_keys=True, one_task=True)
        broadcast = change_frame(full, shuffled, ["k"], full.columns, broadcast_keys=True)
        assert sorted(map(tuple, picked.collect()), key=str) == \
            sorted(map(tuple, broadcast.collect()), key=str)
        assert "Exchange" not in one._jdf.queryExecution().executedPlan().toString()


def test_a_small_tables_landing_order_is_made_in_one_task_without_a_shuffle(spark):
    """A one-task diff's change set is ordered for the landing zone (deletes first, then by
    key) in its own partitions merged, with no shuffle, exactly as the shuffled sort orders it
    — also from a frame of several partitions."""
    from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
    from diffcdc.sinks.openmirroring.rows import landing_changes

    schema = T.StructType([T.StructField("k", T.StringType()), T.StructField("v", T.LongType()),
                           T.StructField(OP, T.IntegerType())])
    rows = [("c", 3, OP_UPDATE), ("a", None, OP_DELETE), ("b", 2, OP_INSERT),
            ("e", None, OP_DELETE), ("d", 4, OP_INSERT), (None, 5, OP_INSERT)]
    frame = spark.createDataFrame(rows[:3], schema).union(spark.createDataFrame(rows[3:], schema))
    assert frame.rdd.getNumPartitions() > 1
    merged = landing_changes(frame, ["k"], ["k", "v"], initial=False, one_task=True)
    sorted_ = landing_changes(frame, ["k"], ["k", "v"], initial=False, single_partition=True)
    assert [tuple(r) for r in merged.collect()] == [tuple(r) for r in sorted_.collect()]
    assert [r["k"] for r in merged.collect()] == ["a", "e", None, "b", "c", "d"]
    assert merged.rdd.getNumPartitions() == 1
    assert "Exchange" not in merged._jdf.queryExecution().executedPlan().toString()
