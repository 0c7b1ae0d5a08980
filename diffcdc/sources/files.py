"""Snapshots in a folder: one entry per snapshot, discovered in lexical order.

An entry is a Parquet file (``*.parquet``), a CSV file with a header row (``*.csv``) or a
folder of Parquet part files. The snapshot id is the entry name. Names starting with ``.`` or
``_`` are ignored (hidden files, ``_SUCCESS``, in-progress uploads), as Spark does.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diffcdc.errors import InputRefused, LateSnapshotError, UsageError
from diffcdc.sources.base import PendingSnapshot, Snapshot, Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.identity import identify, same_files
from diffcdc.sources.parquet_schema import SPARK_SCHEMA_KEY, SUMMARY_FILES, footer_schema
from diffcdc.sources.snapshot_time import SnapshotTimeRule
from diffcdc.spark.paths import literal_path, spark_path

if TYPE_CHECKING:  # discovering snapshots needs no Spark: plan, status, idle runs
    from pyspark.sql import DataFrame, SparkSession

_DECODE_CHUNK = 8 << 20
#: Python's names of the charsets Spark knows by other names.
_SPARK_CHARSETS = {"iso8859-1": "iso-8859-1", "ascii": "us-ascii", "utf-16-be": "utf-16be",
                   "utf-16-le": "utf-16le", "utf-32-be": "utf-32be", "utf-32-le": "utf-32le"}

_FILE_KINDS = {".parquet": "parquet", ".parq": "parquet", ".csv": "csv"}

#: The Parquet reader's option to check each page's CRC where the file has one.
PAGE_CHECKSUMS = "parquet.page.verify-checksum.enabled"


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
    real_source = os.path.realpath(source)
    for name in sorted(os.listdir(source)):
        if name.startswith((".", "_")):
            continue
        path = os.path.join(source, name)
        if os.path.islink(path):
            _check_link(path, name, real_source, table)
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


def _check_link(path: str, name: str, real_source: str, table: str | None) -> None:
    """Refuse a link that is no snapshot of its own: to the source folder or a folder above it
    (a loop: the snapshot would hold the source itself), or to an entry of the source folder
    (an alias such as ``latest -> 2026-11-21``, which sorts after the real snapshots and makes
    every later one late). A link to a file or folder elsewhere is a snapshot like any other."""
    target = os.path.realpath(path)
    common = os.path.commonpath([target, real_source])
    if common == target:
        what = "the source folder itself" if target == real_source else \
            f"{target}, a folder above the source folder"
        why = "a loop, not a snapshot"
    elif common == real_source:
        what = f"{os.path.relpath(target, real_source)} inside the source folder"
        why = "a second name for it, not a snapshot of its own (it would make later snapshots late)"
    else:
        return
    raise InputRefused(
        f"entry {name} is a link to {what}: {why}",
        table=table,
        path=path,
        hint="remove the link, or rename it to start with '.' or '_' so that it is ignored",
    )


def read_snapshot(
    spark: SparkSession,
    entry: SnapshotEntry,
    table: str | None = None,
    infer_csv: bool = False,
    encoding: str = "utf-8",
) -> DataFrame:
    """A lazy DataFrame over one snapshot; refuses empty, corrupt and undecodable files."""
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
    footer: _Footer | None = None
    if entry.kind == "csv":
        check_encoding(entry, encoding, table)
    else:
        footer = check_parquet_footers(entry, table)
    try:
        if entry.kind == "csv":
            df = (
                spark.read.option("header", True)
                .option("inferSchema", infer_csv)
                .option("mode", "FAILFAST")
                .option("multiLine", True)
                .option("escape", '"')
                .option("encoding", _SPARK_CHARSETS.get(codecs.lookup(encoding).name, encoding))
                .csv(literal_path(spark_path(spark, entry.path)))
            )
        else:
            # A page whose CRC the writer recorded is checked (Spark does not by default): a
            # changed byte is refused instead of read as data. Pages without one cannot be.
            reader = spark.read.option(PAGE_CHECKSUMS, "true")
            if footer is not None:  # its schema given: no Spark job to read a footer for it
                schema = footer_schema(spark, spark_path(spark, footer.path), footer.spark)
                reader = reader if schema is None else reader.schema(schema)
            df = reader.parquet(literal_path(spark_path(spark, entry.path)))
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


def check_encoding(entry: SnapshotEntry, encoding: str, table: str | None) -> None:
    """Refuse a CSV file with bytes that are not valid ``encoding`` (Spark would put U+FFFD)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    lines, consumed = 1, 0
    with open(entry.path, "rb") as handle:
        while True:
            chunk = handle.read(_DECODE_CHUNK)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                data = exc.object  # bytes held back from the last chunk, then this chunk
                line = lines + data[: exc.start].count(b"\n")
                offset = consumed - (len(data) - len(chunk)) + exc.start
                raise InputRefused(
                    f"line {line} is not valid {encoding} (byte 0x{data[exc.start]:02x} at "
                    f"offset {offset})",
                    table=table,
                    snapshot=entry.snapshot_id,
                    path=entry.path,
                    hint="set the table's csv_encoding to the file's encoding (e.g. "
                    '"latin-1" or "cp1252"), or fix the extract',
                ) from None
            if not chunk:
                return
            lines += chunk.count(b"\n")
            consumed += len(chunk)


@dataclass(frozen=True)
class _Footer:
    """A data file whose footer stands for every file of a snapshot (they have one schema)."""

    path: str
    spark: bytes | None  #: the Spark schema a Spark writer stored in it


def check_parquet_footers(entry: SnapshotEntry, table: str | None) -> _Footer | None:
    """Refuse a Parquet snapshot whose files' footers cannot be read, naming the part file.

    Returns a file whose footer stands for all of them when they have one schema and the
    snapshot has no summary files (:func:`~diffcdc.sources.parquet_schema.footer_schema`
    makes Spark's schema of it), else None: also when the snapshot has ``name=value`` folders
    (Spark's partition discovery adds, retypes and moves those columns: its reader decides)."""
    spark_decides = False
    if os.path.isdir(entry.path):
        names = []
        for root, folders, files in os.walk(entry.path):
            spark_decides = spark_decides or any(n.startswith(SUMMARY_FILES) for n in files)
            spark_decides = spark_decides or any("=" in f for f in folders)
            names.extend(os.path.join(root, n) for n in files if not n.startswith((".", "_")))
        names.sort()
    else:
        names = [entry.path]
    import pyarrow.parquet as pq  # here: discovering snapshots stays light (plan, status)

    first: tuple[Any, bytes | None] | None = None
    uniform = not spark_decides
    for path in names:
        try:
            metadata = pq.read_metadata(path)
        except OSError as exc:
            reason = exc.strerror or str(exc).splitlines()[0]
            raise _unreadable(entry, path, reason, table) from None
        except Exception as exc:  # ArrowInvalid and friends: not a (complete) Parquet file
            raise _unreadable(entry, path, _first_line(str(exc)), table) from None
        spark_schema = (metadata.metadata or {}).get(SPARK_SCHEMA_KEY)
        if first is None:
            first = (metadata.schema, spark_schema)
        elif uniform:
            uniform = spark_schema == first[1] and metadata.schema.equals(first[0])
        try:
            schema = metadata.schema.to_arrow_schema()
        except Exception:  # noqa: BLE001 - a schema Arrow cannot map: Spark reads it or says why
            continue
        for field in schema:
            if (found := _time_field(field.type, field.name)) is not None:
                raise InputRefused(
                    f"column {found[0]!r} is a Parquet TIME ({found[1]}), a type Spark does "
                    "not read",
                    table=table,
                    snapshot=entry.snapshot_id,
                    path=path,
                    hint="cast it to a string (e.g. '13:45:00.000000') or a timestamp in the "
                    "extract, then run again",
                )
    return _Footer(names[0], first[1]) if uniform and first is not None else None


def _time_field(dtype: Any, path: str) -> tuple[str, str] | None:
    """(the column or nested field, its type) of the first TIME in an Arrow type, or None."""
    import pyarrow as pa

    if pa.types.is_time(dtype):
        return path, str(dtype)
    if pa.types.is_struct(dtype):
        for i in range(dtype.num_fields):
            child = dtype.field(i)
            if found := _time_field(child.type, f"{path}.{child.name}"):
                return found
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _time_field(dtype.value_type, f"{path}[]")
    if pa.types.is_map(dtype):
        return _time_field(dtype.key_type, f"{path} (map key)") or _time_field(
            dtype.item_type, f"{path} (map value)")
    return None


def _unreadable(entry: SnapshotEntry, path: str, reason: str, table: str | None) -> InputRefused:
    return InputRefused(
        f"cannot read snapshot: {reason[:300]}",
        table=table,
        snapshot=entry.snapshot_id,
        path=path,
        hint="the file is corrupt or truncated; replace it and run again",
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


class FolderSource(Source):
    """Snapshots as entries of a folder, read in place, in lexical order of their names."""

    def __init__(
        self, folder: str, table: str, infer_csv: bool = False, encoding: str = "utf-8",
        time_rule: SnapshotTimeRule | None = None,
    ) -> None:
        self.folder = folder
        self.table = table
        self.infer_csv = infer_csv
        self.encoding = encoding
        self.time_rule = time_rule or SnapshotTimeRule()
        self._entries: dict[str, SnapshotEntry] = {}

    def pending(self, committed: Sequence[str]) -> list[PendingSnapshot]:
        entries = discover(self.folder, self.table)
        self._entries = {e.snapshot_id: e for e in entries}
        return [PendingSnapshot(e.snapshot_id, e.path)
                for e in pending_snapshots(entries, committed, self.table)]

    def again(self, snapshot_id: str) -> PendingSnapshot | None:
        if not self._entries:  # not listed by pending (late entries are no matter here)
            self._entries = {e.snapshot_id: e for e in discover(self.folder, self.table)}
        entry = self._entries.get(snapshot_id)
        return PendingSnapshot(entry.snapshot_id, entry.path) if entry else None

    def proven(self, pending: PendingSnapshot, recorded: Sequence[Mapping[str, Any]] | None) -> bool:
        return same_files(pending.path, recorded, self.table, pending.snapshot_id)

    def read_again(self, spark: SparkSession, pending: PendingSnapshot) -> DataFrame:
        assert pending.snapshot_id is not None
        return read_snapshot(spark, self._entries[pending.snapshot_id], self.table,
                             self.infer_csv, self.encoding)

    def read(
        self, spark: SparkSession, pending: PendingSnapshot, copies: SnapshotCopies,
        after: str | None,
    ) -> Snapshot:
        assert pending.snapshot_id is not None
        entry = self._entries[pending.snapshot_id]
        before = identify(entry.path, self.table, entry.snapshot_id)
        time = self.time_rule.time_of(entry.snapshot_id, before, table=self.table,
                                      path=entry.path)
        df = read_snapshot(spark, entry, self.table, self.infer_csv, self.encoding)
        return Snapshot(
            entry.snapshot_id, os.path.abspath(entry.path), df,
            changed=lambda: identify(entry.path, self.table, entry.snapshot_id) != before,
            identity=before, time=time,
        )

    def describe(self) -> str:
        return self.folder


def pending_snapshots(
    entries: list[SnapshotEntry], committed: Sequence[str], table: str
) -> list[SnapshotEntry]:
    """Entries newer than the last committed snapshot (``committed``: the ids of the table's
    commits); a late entry is refused."""
    if not committed:
        return entries
    done = set(committed)
    last = max(done)  # not the head's: a rollback commits an older snapshot again
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

