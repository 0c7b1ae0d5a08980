"""A Spark DataFrame handed over in Python as one snapshot (:func:`diffcdc.run_dataframe`).

A DataFrame is a query: evaluated twice it may give different rows (a database behind it, a
``rand()``, a table written meanwhile). It is therefore written once to a Parquet copy under
the table's state and the diff runs on the copy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from diffcdc.core.schema import check_column_types
from diffcdc.errors import DiffcdcError, InputRefused, SourceError
from diffcdc.sources.base import PendingSnapshot, Snapshot, Source, check_order
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.jdbc import snapshot_id_now
from diffcdc.sources.snapshot_time import as_utc
from diffcdc.spark.compat import calendar_interval_column, error_text
from diffcdc.spark.paths import spark_path
from diffcdc.spark.settings import in_time_zone


def evaluation_error(exc: BaseException) -> str:
    """What went wrong evaluating a DataFrame, in one line: for a Python function (a UDF) that
    raised, its exception (``ValueError: customer 3 has no region``), not Spark's first line
    ("An exception was thrown from the Python worker:")."""
    text = error_text(exc).strip()
    if not text:
        return type(exc).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text:
        # the exception line ends the trace: the last line not indented as the trace's frames
        cause = next((line.strip() for line in reversed(lines) if not line[0].isspace()), lines[-1])
        return f"a Python function (UDF) raised {cause}"
    return lines[0].strip()


class DataFrameSource(Source):
    """One DataFrame, one snapshot; its id and as-of time are given or the time it is handed
    over (UTC)."""

    materialized = True

    def __init__(self, df: DataFrame, table: str, snapshot_id: str | None = None,
                 description: str = "a Spark DataFrame", zone: str | None = None,
                 time: dt.datetime | None = None) -> None:
        self.df = df
        self.table = table
        self.snapshot_id = snapshot_id
        #: The snapshot's as-of time (default: the moment it is handed over).
        self.time = as_utc(time) if time is not None else dt.datetime.now(dt.timezone.utc)
        self.description = description
        #: The caller's session time zone, which the DataFrame is evaluated in (None: the
        #: session's own, as diffcdc set it).
        self.zone = zone

    def describe(self) -> str:
        return self.description

    def pending(self, committed: Sequence[str]) -> list[PendingSnapshot]:
        sid = self.snapshot_id or snapshot_id_now(self.time)
        last = committed[-1] if committed else None
        if not check_order(sid, last, self.table, self.description):
            return []  # this snapshot id is already committed: nothing to do
        return [PendingSnapshot(sid, self.description)]

    def again(self, snapshot_id: str) -> PendingSnapshot | None:
        return PendingSnapshot(snapshot_id, self.description)  # a reload re-reads the DataFrame

    def read(
        self, spark: SparkSession, pending: PendingSnapshot, copies: SnapshotCopies,
        after: str | None,
    ) -> Snapshot:
        assert pending.snapshot_id is not None
        sid = pending.snapshot_id
        column = calendar_interval_column(self.df)  # Parquet cannot hold one, at any depth
        if column is not None:
            name, type_text = column
            raise InputRefused(
                f"column {name} has type {type_text}, which a "
                "snapshot cannot hold (Parquet has no calendar interval)",
                table=self.table,
                snapshot=sid,
                hint=f"cast {name} in the DataFrame, e.g. to a string, or to a day-time "
                "interval (make_dt_interval) when it has no months",
            )
        # before the copy: Spark cannot even write a TIME, and no sink takes these types
        check_column_types(self.df.schema, table=self.table, snapshot=sid)
        try:
            with in_time_zone(spark, self.zone):  # evaluated as the caller would
                copy = copies.write(self.df, sid)
        except DiffcdcError:
            raise
        except Exception as exc:
            if "UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE" in str(exc):  # a type Parquet cannot hold
                raise InputRefused(
                    f"the DataFrame has a column of a type a snapshot cannot hold: "
                    f"{evaluation_error(exc)[:300]}",
                    table=self.table,
                    snapshot=sid,
                    hint="cast the column in the DataFrame (e.g. to a string)",
                ) from None
            raise SourceError(
                f"the DataFrame could not be evaluated: {evaluation_error(exc)[:300]}",
                table=self.table,
                snapshot=sid,
                hint="check the DataFrame's query (df.collect() shows the full error)",
            ) from exc
        return Snapshot(sid, self.description, spark.read.parquet(spark_path(spark, copy)),
                        time=self.time)
