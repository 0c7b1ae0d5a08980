"""Snapshots in a folder: one entry per snapshot, discovered in lexical order.

An entry is a Parquet file (``*.parquet``), a CSV file with a header row (``*.csv``) or a
folder of Parquet part files. The snapshot id is the entry name. Names starting with ``.`` or
``_`` are ignored (hidden files, ``_SUCCESS``, in-progress uploads), as Spark does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diffcdc.errors import InputRefused, UsageError

if TYPE_CHECKING:  # discovering snapshots needs no Spark: ``diffcdc plan`` and idle runs
    from pyspark.sql import DataFrame, SparkSession

_FILE_KINDS = {".parquet": "parquet", ".parq": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class SnapshotEntry:
    """One snapshot in a source folder."""

    snapshot_id: str  #: the entry name; ordering is lexical on this
    path: str
    kind: str  #: "parquet" (file or folder) or "csv"


def discover(source: str, table: str | None = None) -> list[SnapshotEntry]:
    """All snapshot entries in ``source``, in lexical order."""
    if not os.path.isdir(source):
        raise UsageError(
            f"source folder {source} does not exist or is not a folder",
            table=table,
            path=source,
            hint="point --source at a folder with one file or folder per snapshot",
        )
    entries = []
    for name in sorted(os.listdir(source)):
        if name.startswith((".", "_")):
            continue
        path = os.path.join(source, name)
        if os.path.isdir(path):
            entries.append(SnapshotEntry(name, path, "parquet"))
            continue
        kind = _FILE_KINDS.get(os.path.splitext(name)[1].lower())
        if kind is None:
            raise InputRefused(
                "unsupported snapshot file type (expected .parquet, .csv or a folder of "
                "Parquet part files)",
                table=table,
                snapshot=name,
                path=path,
                hint="move the file out of the source folder",
            )
        entries.append(SnapshotEntry(name, path, kind))
    return entries


def read_snapshot(
    spark: SparkSession, entry: SnapshotEntry, table: str | None = None, infer_csv: bool = False
) -> DataFrame:
    """A lazy DataFrame over one snapshot; refuses empty folders and unreadable files."""
    from pyspark.sql.utils import AnalysisException

    if entry.kind == "parquet" and os.path.isdir(entry.path):
        parts = [
            n for n in os.listdir(entry.path) if not n.startswith((".", "_")) and os.path.isfile(os.path.join(entry.path, n))
        ]
        if not parts:
            raise InputRefused(
                "snapshot folder has no data files",
                table=table,
                snapshot=entry.snapshot_id,
                path=entry.path,
                hint="the extract may still be running or failed; fix or remove the folder",
            )
    elif os.path.getsize(entry.path) == 0:
        raise InputRefused(
            "snapshot file is empty (0 bytes)",
            table=table,
            snapshot=entry.snapshot_id,
            path=entry.path,
            hint="the extract was probably truncated; replace the file and run again",
        )
    try:
        if entry.kind == "csv":
            df = (
                spark.read.option("header", True)
                .option("inferSchema", infer_csv)
                .option("mode", "FAILFAST")
                .option("multiLine", True)
                .option("escape", '"')
                .csv(entry.path)
            )
        else:
            df = spark.read.parquet(entry.path)
        if not df.columns:
            raise InputRefused("snapshot has no columns", table=table, snapshot=entry.snapshot_id, path=entry.path)
        return df
    except AnalysisException as exc:
        raise InputRefused(
            f"cannot read snapshot: {_first_line(str(exc))}",
            table=table,
            snapshot=entry.snapshot_id,
            path=entry.path,
            hint="check that the file is complete and in the expected format",
        ) from exc


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
