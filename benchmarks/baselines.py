"""What users would write instead of diffcdc, each timed on the same snapshot files.

Every engine gets a :class:`Case` (previous snapshot or ``None`` for a first load, current
snapshot, a scratch folder) and returns an :class:`EngineRun`: the timed block's wall time and
peak RSS, the output files it wrote (read back afterwards by :mod:`benchmarks.verify`) and the
bytes it keeps as state for the next run. Setup that a steady-state deployment has already
done (e.g. loading snapshot 1 into a Delta table) is timed apart as ``setup_seconds``.

Output conventions: Spark and DuckDB write the Open Mirroring marker ``__rowMarker__``
(0 insert, 1 update with the full new row, 2 delete with the key only); Delta writes its
change data feed as read by ``load_cdf`` (``_change_type``, pre-images dropped).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .measure import du, measure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MARKER = "__rowMarker__"


@dataclass
class Case:
    """One diff to compute: ``prev`` -> ``cur`` (``prev`` None: first load)."""

    prev: str | None
    cur: str
    work: str
    key: str = "id"


@dataclass
class EngineRun:
    """What one engine did on one case."""

    seconds: float
    peak_rss_bytes: int
    output_files: list[str]
    state_bytes: int
    output_bytes: int
    setup_seconds: float = 0.0
    rss_before_bytes: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


class EngineUnavailable(RuntimeError):
    """The engine cannot run here (missing package or module)."""


def data_files(folder: str) -> list[str]:
    """Parquet files under ``folder`` (recursive), skipping ``_``/``.`` names like Spark does."""
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        out += [
            os.path.join(root, f)
            for f in sorted(files)
            if f.endswith(".parquet") and not f.startswith(("_", "."))
        ]
    return out


def _fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _finish(m: Any, output: str, state_bytes: int, setup: float = 0.0, **notes: Any) -> EngineRun:
    files = data_files(output)
    return EngineRun(
        m.seconds,
        m.peak_rss_bytes,
        files,
        state_bytes,
        sum(map(os.path.getsize, files)),
        setup,
        m.rss_before_bytes,
        dict(notes),
    )


# --- (a) Spark exceptAll both ways + classification -------------------------------------------


def run_except_all(case: Case, spark: SparkSession) -> EngineRun:
    """``cur.exceptAll(prev)`` and ``prev.exceptAll(cur)``, full-outer-joined on the key."""
    from pyspark.sql import functions as F

    output = os.path.join(case.work, "output")
    shutil.rmtree(output, ignore_errors=True)
    with measure() as m:
        cur = spark.read.parquet(case.cur)
        prev = spark.read.parquet(case.prev) if case.prev else spark.createDataFrame([], cur.schema)
        added = cur.exceptAll(prev).withColumn("_a", F.lit(True))  # new rows and new versions
        removed = prev.exceptAll(cur).select(case.key, F.lit(True).alias("_r"))  # old keys
        joined = added.join(removed, on=case.key, how="full_outer")
        marker = (
            F.when(F.col("_r").isNull(), 0)
            .when(F.col("_a").isNull(), 2)
            .otherwise(1)
            .cast("int")
            .alias(MARKER)
        )
        values = [c for c in cur.columns if c != case.key]
        joined.select(case.key, *values, marker).write.parquet(output)
    # the next run needs this snapshot again, in full
    return _finish(m, output, du(case.cur))


# --- (b) Delta Lake MERGE (delta-rs) + change data feed --------------------------------------


def _reader(path: str) -> Any:
    import pyarrow.dataset as ds

    return ds.dataset(path, format="parquet").scanner().to_reader()


def run_delta(case: Case, spark: SparkSession | None = None) -> EngineRun:
    """MERGE the full snapshot into a CDF-enabled Delta table; write the feed of that commit."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from deltalake import DeltaTable, write_deltalake
    except ImportError as exc:  # pragma: no cover
        raise EngineUnavailable(f"deltalake is not installed: {exc}") from exc

    table = _fresh(os.path.join(case.work, "delta"))
    output = _fresh(os.path.join(case.work, "output"))
    config = {"delta.enableChangeDataFeed": "true"}
    setup = 0.0
    if case.prev:
        started = time.perf_counter()
        write_deltalake(table, _reader(case.prev), configuration=config)
        setup = time.perf_counter() - started
    with measure() as m:
        before = -1
        if case.prev:
            dt = DeltaTable(table)
            before = dt.version()
            names = _reader(case.cur).schema.names
            differs = " OR ".join(f"(t.{c} IS DISTINCT FROM s.{c})" for c in names if c != case.key)
            metrics = (
                dt.merge(
                    _reader(case.cur),
                    f"t.{case.key} = s.{case.key}",
                    source_alias="s",
                    target_alias="t",
                )
                .when_matched_update_all(predicate=differs)
                .when_not_matched_insert_all()
                .when_not_matched_by_source_delete()
                .execute()
            )
        else:
            write_deltalake(table, _reader(case.cur), configuration=config)
            metrics = {}
        dt = DeltaTable(table)
        version = dt.version()
        writer, part, rows = None, 0, 0
        # a MERGE that changes nothing makes no commit: then there is no feed to read
        feed = iter(())
        if version > before:
            feed = pa.RecordBatchReader.from_stream(
                dt.load_cdf(starting_version=version, ending_version=version)
            )
            # delta-rs yields string_view columns, which some Arrow kernels cannot filter yet
            plain = pa.schema(
                [
                    f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f
                    for f in feed.schema
                ]
            )
            feed = feed.cast(plain)
        for batch in feed:
            batch = batch.filter(pc.not_equal(batch.column("_change_type"), "update_preimage"))
            if batch.num_rows == 0:
                continue
            if writer is None:
                writer = pq.ParquetWriter(
                    os.path.join(output, f"cdf-{part:05d}.parquet"), batch.schema
                )
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
    keep = {
        k: metrics.get(k)
        for k in (
            "num_target_rows_inserted",
            "num_target_rows_updated",
            "num_target_rows_deleted",
            "num_target_rows_copied",
        )
    }
    return _finish(m, output, du(table), setup, version=version, feed_rows=rows, **keep)


# --- (c) DuckDB: full outer join on the key with a row hash ----------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def run_duckdb(
    case: Case, spark: SparkSession | None = None, threads: int | None = None
) -> EngineRun:
    """``hash(all value columns)`` per side, full outer join on the key, changed rows to Parquet."""
    try:
        import duckdb
    except ImportError as exc:  # pragma: no cover
        raise EngineUnavailable(f"duckdb is not installed: {exc}") from exc

    output = _fresh(os.path.join(case.work, "output"))
    target = os.path.join(output, "changes.parquet")
    con = duckdb.connect(config={"temp_directory": os.path.join(case.work, "duckdb.tmp")})
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    cur_src = f"read_parquet('{case.cur}/*.parquet')"
    prev_src = (
        f"read_parquet('{case.prev}/*.parquet')"
        if case.prev
        else f"(SELECT * FROM {cur_src} LIMIT 0)"
    )
    with measure() as m:
        names = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {cur_src}").fetchall()]
        key = _quote(case.key)
        values = [_quote(n) for n in names if n != case.key]
        row_hash = f"hash({', '.join(values)})"
        con.execute(f"""
            COPY (
              SELECT COALESCE(n.{key}, o.{key}) AS {key},
                     {", ".join("n." + v for v in values)},
                     (CASE WHEN o.{key} IS NULL THEN 0 WHEN n.{key} IS NULL THEN 2 ELSE 1 END)::INTEGER
                       AS {MARKER}
              FROM (SELECT {key}, {row_hash} AS _h FROM {prev_src}) o
              FULL OUTER JOIN (SELECT *, {row_hash} AS _h FROM {cur_src}) n ON o.{key} = n.{key}
              WHERE o.{key} IS NULL OR n.{key} IS NULL OR o._h <> n._h
            ) TO '{target}' (FORMAT parquet, COMPRESSION snappy)
        """)
    con.close()
    return _finish(m, output, du(case.cur))


ENGINES = {
    "exceptall": run_except_all,
    "delta": run_delta,
    "duckdb": run_duckdb,
}
NEEDS_SPARK = {"exceptall", "diffcdc"}
