"""Bulk loading rows into an existing PostgreSQL table by COPY, from Spark's executors in
parallel.

:func:`copy_into` loads staged Parquet files (a folder Spark wrote) or a DataFrame into a table
that already exists. Each staged file (or each partition of a DataFrame) is one *part*, loaded
by one Spark task over its own connection in ONE transaction: take an advisory lock on (table,
part), delete the rows a former attempt of the part left (``__diffcdc_part`` = part), COPY the
part's rows with the part number. A retried or speculative task therefore replaces its own
part's rows, never adds them twice; a part's rows are all there or none. The files' total size
decides where the tasks run: small inputs, and a single file of any size, are loaded in this
process when the executors share its machine (a Spark job costs more than a few small files,
:func:`diffcdc.staged_files.on_executors`, and one file is one task anyway), larger ones by one
Spark task per file (measured in benchmarks/README.md: 5M rows in 5 files, 1.43x faster by two
tasks at a time than in this process). Afterwards the table must hold exactly the rows loaded, or the load fails.

A table without the ``__diffcdc_part`` column is loaded from this process in one transaction
(one connection): all or nothing, with no parallelism.

The rows go as COPY ``FORMAT csv`` text made by Arrow (:func:`diffcdc.sinks.postgres.types.csv_batch`;
measured against psycopg's binary COPY with ``write_row`` in benchmarks/README.md). A value
PostgreSQL cannot hold (a NUL character in text) fails the load in one line naming the column;
a task reports it as data, not as an exception, so the message is not lost in Spark's trace.
Only DataFrame operations are used (``mapInArrow``): it runs through Spark Connect and on
PySpark 3.5.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from psycopg import sql

from diffcdc.core.sql import quote
from diffcdc.errors import DiffcdcError, InputRefused
from diffcdc.sinks.postgres.connection import (
    PgConnection,
    PostgresUnavailable,
    connect,
    database_error,
    first_line,
)
from diffcdc.sinks.postgres.types import PART_COLUMN, csv_batch

if TYPE_CHECKING:
    import psycopg
    from pyspark.sql import DataFrame, SparkSession

#: Rows per Arrow batch read from a staged file (and per COPY write).
BATCH_ROWS = 65536
_RESULT_SCHEMA = "part int, rows long, kind string, error string"


@dataclass(frozen=True)
class PartDone:
    """What one part's load did: its rows, or why it failed (``kind``: the error's class)."""

    part: int
    rows: int
    kind: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class _Load:
    """What every task needs (picklable: shipped to the executors)."""

    conn: PgConnection
    target: tuple[str, str]
    columns: tuple[str, ...]
    where: str

    @property
    def name(self) -> str:
        return f"{self.target[0]}.{self.target[1]}"


def copy_into(spark: SparkSession | None, frame_or_paths: DataFrame | str, conn: PgConnection,
              target: tuple[str, str], columns: Sequence[str], where: str) -> int:
    """Load the rows of ``frame_or_paths`` (a DataFrame, or a folder of Parquet files Spark
    wrote) into the EXISTING, empty table ``target`` (schema, name), its ``columns`` (in the
    rows' names; the table has the same names); the number of rows loaded. ``spark`` None:
    staged files are loaded from this process without a Spark job.

    A DataFrame's partition is its part: a retried partition must hold the same rows (a
    DataFrame read from files, or one checkpointed, does; one made by a random shuffle may not),
    as a staged file always does."""
    load = _Load(conn, target, tuple(columns), where)
    with connect(conn, where) as c:
        parted = _has_part_column(c, load)
    if isinstance(frame_or_paths, str):
        return _load_files(spark, frame_or_paths, load, parted)
    if not parted:
        raise DiffcdcError(f"{where}: table {load.name} has no {PART_COLUMN!r} column, which a "
                           "load of a DataFrame from the executors needs",
                           hint="create the table with it (see diffcdc/sinks/postgres/copy.py)")
    # positional names: PySpark's mapInArrow resolves each column by name, which fails on a name
    # with a dot (``a.b``); the task gives the batches their names back
    positional = [f"{quote(c)} AS _c{i}" for i, c in enumerate(columns)]
    results = frame_or_paths.selectExpr(*positional).mapInArrow(
        functools.partial(_load_partition, load), _RESULT_SCHEMA).collect()
    return _finish(load, [PartDone(r[0], r[1], r[2], r[3]) for r in results])


def _has_part_column(c: psycopg.Connection[Any], load: _Load) -> bool:
    schema, name = load.target
    try:
        found = c.execute(
            "SELECT a.attname FROM pg_attribute a JOIN pg_class t ON t.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = %s AND "
            "t.relname = %s AND a.attnum > 0 AND NOT a.attisdropped", (schema, name)).fetchall()
    except Exception as exc:  # noqa: BLE001 - any server failure is one line
        raise database_error(load.where, f"reading the columns of {load.name}", exc,
                             "check the server, then run again") from None
    if not found:
        raise DiffcdcError(f"{load.where}: table {load.name} to load into does not exist",
                           hint="run again (the load creates it first)")
    return PART_COLUMN in {r[0] for r in found}


def _load_here(folder: str, load: _Load, parted: bool) -> int:
    """Staged files loaded from this process, no Spark job (``copy_into(None, ...)``: a sink's
    publish after the commit, which must not need the Spark session, e.g. a Spark Connect
    server gone): each file its own part, or all in one transaction."""
    from diffcdc.storage import paths

    files = [paths.join(folder, f.name) for f in paths.data_file_infos(folder)]
    if not parted:
        return _finish(load, list(_load_in_one(load, files)))
    return _finish(load, list(_load_parts(load, iter(enumerate(files)))))


def _load_files(spark: SparkSession | None, folder: str, load: _Load, parted: bool) -> int:
    from diffcdc.staged_files import StagedFolder, on_executors

    if spark is None:
        return _load_here(folder, load, parted)

    files = StagedFolder(spark, folder, table=load.where).data_files()
    if not parted:
        return _finish(load, list(_load_in_one(load, [f.path for f in files])))
    items = [(i, f.path) for i, f in enumerate(files)]
    # one file is one task whatever its size: no Spark job pays off then (benchmarks/README.md)
    size = sum(f.size for f in files) if len(files) > 1 else 0
    done = on_executors(spark, items, functools.partial(_load_parts, load), input_bytes=size)
    return _finish(load, done)


def _finish(load: _Load, done: Sequence[PartDone]) -> int:
    """Raise the first part's failure; check the table holds exactly the rows loaded."""
    for part in sorted(done, key=lambda p: p.part):
        if part.error is not None:
            cls = {"InputRefused": InputRefused,
                   "PostgresUnavailable": PostgresUnavailable}.get(part.kind or "", DiffcdcError)
            raise cls(part.error)
    rows = sum(p.rows for p in done)
    with connect(load.conn, load.where) as c:
        try:
            held = c.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(*load.target))).fetchone()
        except Exception as exc:  # noqa: BLE001
            raise database_error(load.where, f"counting the rows loaded into {load.name}", exc,
                                 "run again") from None
    assert held is not None
    if held[0] != rows:
        raise DiffcdcError(
            f"{load.where}: table {load.name} holds {held[0]} rows after loading {rows}: "
            "another session wrote to it, or it was not empty",
            hint="run again (the load starts from a new table)")
    return rows


def _copy_statement(load: _Load, with_part: bool) -> sql.Composed:
    names = [*load.columns, PART_COLUMN] if with_part else list(load.columns)
    return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
        sql.Identifier(*load.target), sql.SQL(", ").join(map(sql.Identifier, names)))


def _batches(path: str, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    from diffcdc.state.check_read import parquet_dataset

    yield from parquet_dataset(path).to_batches(columns=list(columns), batch_size=BATCH_ROWS,
                                                use_threads=False)


def _part_rows(c: psycopg.Connection[Any], load: _Load, part: int,
               batches: Iterator[pa.RecordBatch]) -> int:
    """In ``c``'s open transaction: replace part ``part``'s rows by ``batches``."""
    c.execute("SELECT pg_advisory_xact_lock(hashtext(%s), %s)", (load.name, part))
    c.execute(sql.SQL("DELETE FROM {} WHERE {} = %s").format(
        sql.Identifier(*load.target), sql.Identifier(PART_COLUMN)), (part,))
    rows = 0
    with c.cursor().copy(_copy_statement(load, True)) as copy:
        for batch in batches:
            if batch.num_rows:
                part_values = pa.array([part] * batch.num_rows, pa.int32())
                copy.write(csv_batch(batch, load.columns, load.where,
                                     extra=[(PART_COLUMN, part_values)]))
                rows += batch.num_rows
    return rows


def _guarded(load: _Load, part: int, run: Any) -> PartDone:
    """``run(connection)`` in one transaction; any failure as a :class:`PartDone` error."""
    import psycopg

    try:
        with connect(load.conn, load.where) as c:
            with c.transaction():
                rows = run(c)
        return PartDone(part, rows)
    except DiffcdcError as exc:
        return PartDone(part, 0, type(exc).__name__, str(exc))
    except psycopg.Error as exc:
        err = database_error(load.where, f"loading rows into {load.name}", exc,
                             "run again (nothing of this load was kept)")
        return PartDone(part, 0, type(err).__name__, str(err))
    except (OSError, pa.ArrowException) as exc:  # a staged file unreadable or not as staged
        return PartDone(part, 0, "DiffcdcError",
                        f"{load.where}: reading staged rows for {load.name}: {first_line(exc)}")


def _load_parts(load: _Load, items: Iterator[tuple[int, str]]) -> Iterator[PartDone]:
    """Each staged file (part number, path): its own transaction (in a task, or in process)."""
    for part, path in items:
        yield _guarded(load, part, lambda c, part=part, path=path: _part_rows(
            c, load, part, _batches(path, load.columns)))


def _load_partition(load: _Load, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A DataFrame partition (in its Spark task): its rows as part = the partition's number."""
    from pyspark import TaskContext

    context = TaskContext.get()
    part = context.partitionId() if context is not None else 0
    named = (pa.RecordBatch.from_arrays(b.columns, names=list(load.columns)) for b in batches)
    done = _guarded(load, part, lambda c: _part_rows(c, load, part, named))
    yield pa.RecordBatch.from_pydict(
        {"part": [done.part], "rows": [done.rows], "kind": [done.kind], "error": [done.error]},
        schema=pa.schema([("part", pa.int32()), ("rows", pa.int64()), ("kind", pa.string()),
                          ("error", pa.string())]))


def _load_in_one(load: _Load, files: Sequence[str]) -> Iterator[PartDone]:
    """Every file in one transaction over one connection (a table without the part column)."""

    def run(c: psycopg.Connection[Any]) -> int:
        rows = 0
        with c.cursor().copy(_copy_statement(load, False)) as copy:
            for path in files:
                for batch in _batches(path, load.columns):
                    if batch.num_rows:
                        copy.write(csv_batch(batch, load.columns, load.where))
                        rows += batch.num_rows
        return rows

    yield _guarded(load, 0, run)
