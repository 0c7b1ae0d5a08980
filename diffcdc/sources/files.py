"""Snapshots in a folder: one entry per snapshot, discovered in lexical order.

An entry is a Parquet file (``*.parquet``), a CSV file with a header row (``*.csv``) or a
folder of Parquet part files. The snapshot id is the entry name. Names starting with ``.`` or
``_`` are ignored (hidden files, ``_SUCCESS``, in-progress uploads), as Spark does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.utils import AnalysisException

from diffcdc.errors import InputRefused, LateSnapshotError, UsageError
from diffcdc.sources.base import PendingSnapshot, Snapshot, Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.state.store import Commit

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


class FolderSource(Source):
    """Snapshots as entries of a folder, read in place, in lexical order of their names."""

    def __init__(self, folder: str, table: str, infer_csv: bool = False) -> None:
        self.folder = folder
        self.table = table
        self.infer_csv = infer_csv
        self._entries: dict[str, SnapshotEntry] = {}

    def pending(self, commits: list[Commit]) -> list[PendingSnapshot]:
        entries = discover(self.folder, self.table)
        self._entries = {e.snapshot_id: e for e in entries}
        return [PendingSnapshot(e.snapshot_id, e.path) for e in pending_snapshots(entries, commits, self.table)]

    def again(self, snapshot_id: str) -> PendingSnapshot | None:
        entry = self._entries.get(snapshot_id)
        return PendingSnapshot(entry.snapshot_id, entry.path) if entry else None

    def read(
        self, spark: SparkSession, pending: PendingSnapshot, copies: SnapshotCopies,
        after: str | None,
    ) -> Snapshot:
        assert pending.snapshot_id is not None
        entry = self._entries[pending.snapshot_id]
        before = signature(entry.path)
        df = read_snapshot(spark, entry, self.table, self.infer_csv)
        return Snapshot(
            entry.snapshot_id, os.path.abspath(entry.path), df,
            changed=lambda: signature(entry.path) != before,
        )

    def describe(self) -> str:
        return self.folder


def pending_snapshots(
    entries: list[SnapshotEntry], commits: list[Commit], table: str
) -> list[SnapshotEntry]:
    """Entries newer than the last committed snapshot; a late entry is refused."""
    if not commits:
        return entries
    done = {c.snapshot_id for c in commits}
    last = commits[-1].snapshot_id
    late = [e for e in entries if e.snapshot_id <= last and e.snapshot_id not in done]
    if late:
        raise LateSnapshotError(
            f"snapshot sorts at or before the last committed snapshot {last} but was never "
            "processed",
            table=table,
            snapshot=late[0].snapshot_id,
            path=late[0].path,
            hint="snapshots must arrive in lexical order; move it out of the source folder",
        )
    return [e for e in entries if e.snapshot_id > last]


def signature(path: str) -> list[tuple[str, int, int]]:
    """Size and mtime of a snapshot's files, to notice a snapshot changing mid-run."""
    if os.path.isdir(path):
        out = []
        for name in sorted(os.listdir(path)):
            st = os.stat(os.path.join(path, name))
            out.append((name, st.st_size, st.st_mtime_ns))
        return out
    st = os.stat(path)
    return [("", st.st_size, st.st_mtime_ns)]
