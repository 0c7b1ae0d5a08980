"""The Open Mirroring landing zone (spec §1): table folders, ``_metadata.json``, data files.

This module stages a change set as final-named files and publishes staged files through a
:class:`~diffcdc.sinks.storage.base.LandingStorage`. It knows the landing contract; the storage
knows only bytes.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from diffcdc.core.fingerprint import quote
from diffcdc.errors import LandingZoneMismatch
from diffcdc.sinks.base import OP, OP_DELETE, OP_INSERT
from diffcdc.sinks.openmirroring.text import TextFormat
from diffcdc.sinks.openmirroring.text_encode import write_text_file
from diffcdc.sinks.storage.base import LandingStorage, PublishItem, file_sha256, join
from diffcdc.staged_files import HadoopFolder, on_executors

#: The row-marker column, last in every incremental file, and its values (spec §1).
ROW_MARKER = "__rowMarker__"
MARKER_INSERT, MARKER_UPDATE, MARKER_DELETE, MARKER_UPSERT = 0, 1, 2, 4
_GRP = "__diffcdc_grp"
#: Folders the mirroring service moves processed files into (inside the table folder).
CLEANUP_FOLDERS = ("_ProcessedFiles", "_FilesReadyToDelete")
METADATA_FILE = "_metadata.json"
PARTNER_EVENTS_FILE = "_partnerEvents.json"
LAST_UPDATE_TIME_DETECTION = "LastUpdateTimeFileDetection"
_SEQ_RE = re.compile(r"^(\d{20})\.([A-Za-z0-9]+)$")
_PART_RE = re.compile(r"^part-(\d+)-.*?-c(\d+)(\..*)?$")


def table_folder(table: str, schema_name: str | None = None) -> str:
    """``<Table>`` or ``<schema>.schema/<Table>``, relative to the landing root."""
    return join(f"{schema_name}.schema", table) if schema_name else table


def data_file_name(sequence: int, extension: str = "parquet") -> str:
    return f"{sequence:020d}.{extension}"


def metadata_document(
    keys: Sequence[str],
    *,
    upsert_default: bool = False,
    last_update_time: bool = False,
    text: TextFormat | None = None,
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The table's ``_metadata.json`` content.

    ``text`` and ``schema`` (a ``SchemaDefinition``) are given for delimited text only. CSV
    relies on the spec's default ``FileFormat``; every other extension says ``DelimitedText``.
    """
    doc: dict[str, Any] = {"keyColumns": list(keys)}
    if last_update_time:
        doc["fileDetectionStrategy"] = LAST_UPDATE_TIME_DETECTION
    if upsert_default:
        doc["isUpsertDefaultRowMarker"] = True
    if text is not None:
        if text.extension.lower() != "csv":
            doc["FileFormat"] = "DelimitedText"
        doc["FileExtension"] = text.extension
        doc["SchemaDefinition"] = schema or {"Columns": []}
        doc["FileFormatTypeProperties"] = text.properties()
    return doc


def _stable(col: Column, dtype: T.DataType) -> Column:
    """``col`` with the entries of every map (at any depth) sorted by key."""
    if isinstance(dtype, T.MapType):
        value = col
        if _has_map(dtype.valueType):
            value = F.transform_values(col, lambda _k, v: _stable(v, dtype.valueType))
        return F.map_from_entries(
            F.array_sort(
                F.map_entries(value),
                lambda left, right: F.when(left["key"] < right["key"], -1)
                .when(left["key"] > right["key"], 1)
                .otherwise(0),
            )
        )
    if isinstance(dtype, T.ArrayType) and _has_map(dtype.elementType):
        return F.transform(col, lambda x: _stable(x, dtype.elementType))
    if isinstance(dtype, T.StructType) and _has_map(dtype):
        return F.when(
            col.isNotNull(),
            F.struct(*[_stable(col[f.name], f.dataType).alias(f.name) for f in dtype.fields]),
        )
    return col


def _has_map(dtype: T.DataType) -> bool:
    if isinstance(dtype, T.MapType):
        return True
    if isinstance(dtype, T.ArrayType):
        return _has_map(dtype.elementType)
    if isinstance(dtype, T.StructType):
        return any(_has_map(f.dataType) for f in dtype.fields)
    return False


def to_landing_columns(df: DataFrame) -> DataFrame:
    """Project a snapshot to landing column types.

    Complex types are written as JSON strings (spec §1); map entries are sorted by key at
    every depth so the text is stable. Everything else (binary, decimal, date, timestamp)
    keeps its Spark type and so its Parquet logical type.
    """
    out = []
    for field in df.schema.fields:
        col = F.col(quote(field.name))
        if isinstance(field.dataType, (T.MapType, T.StructType, T.ArrayType)):
            out.append(
                F.when(col.isNotNull(), F.to_json(_stable(col, field.dataType))).alias(field.name)
            )
        else:
            out.append(col)
    return df.select(*out)


@dataclass(frozen=True)
class StagedFile:
    """A final-named data file in the staging area, ready to publish."""

    name: str
    sequence: int
    rows: int
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sequence": self.sequence,
            "rows": self.rows,
            "bytes": self.size,
            "sha256": self.sha256,
        }


def stage_parquet_files(
    changes: DataFrame,
    raw_dir: str,
    out_dir: str,
    *,
    codec: str,
    max_rows_per_file: int,
    first_sequence: int,
    text: TextFormat | None = None,
    table: str = "",
) -> list[StagedFile]:
    """Write an ordered change set with Spark and give the files their sequence names.

    Spark writes the (globally sorted) DataFrame as part files; their order (task number, then
    file counter) is the row order. The part files are found and renamed through Hadoop
    (:mod:`diffcdc.staged_files`); their rows, size and SHA-256 are read by executors, one
    task per file. Empty part files are dropped: the landing zone must never see an empty
    file. With ``text``, every Parquet part becomes one delimited text file (written
    deterministically by :mod:`diffcdc.sinks.openmirroring.text`, compressed with ``codec``), on
    the executors too.
    """
    part_codec = "snappy" if text is not None else codec
    (
        changes.write.mode("errorifexists")
        .option("compression", "uncompressed" if part_codec == "none" else part_codec)
        .option("maxRecordsPerFile", max_rows_per_file)
        .parquet(raw_dir)
    )
    spark = changes.sparkSession
    raw = HadoopFolder(spark, raw_dir, table=table)
    parts = []
    for part in raw.files():
        match = _PART_RE.match(part.name)
        if match and part.name.endswith(".parquet"):
            parts.append(((int(match.group(1)), int(match.group(2))), part))
    parts.sort(key=lambda p: p[0])
    tasks = [(index, part.on_nodes(table, "staged part")) for index, (_, part) in enumerate(parts)]
    size = sum(part.size for _, part in parts)
    facts = sorted(on_executors(spark, tasks, _part_facts(text, codec), input_bytes=size))
    out = HadoopFolder(spark, out_dir, table=table)
    out.mkdirs()
    staged = []
    sequence = first_sequence
    for index, rows, size, sha256 in facts:
        if rows == 0:
            continue
        final = data_file_name(sequence, text.extension if text else "parquet")
        name = parts[index][1].name
        out.rename_in(raw.child(name + _TEXT_SUFFIX if text else name), final)
        staged.append(StagedFile(final, sequence, rows, size, sha256))
        sequence += 1
    return staged


#: Suffix of the text file an executor writes beside the Parquet part it converted.
_TEXT_SUFFIX = ".text"


def _part_facts(
    text: TextFormat | None, codec: str
) -> Callable[[Iterator[tuple[int, str]]], Iterator[tuple[int, int, int, str]]]:
    """Executor work: (index, part path) → (index, rows, bytes, sha256) of the file to publish."""

    def facts(parts: Iterator[tuple[int, str]]) -> Iterator[tuple[int, int, int, str]]:
        for index, path in parts:
            rows = pq.ParquetFile(path).metadata.num_rows
            if rows == 0:
                yield index, 0, 0, ""
                continue
            target = path
            if text is not None:
                # written beside, then renamed by this task: two attempts of one task (a retry,
                # speculation) never leave a half-written file under the name the driver renames
                target = path + _TEXT_SUFFIX
                attempt = f"{target}.{uuid.uuid4().hex}"
                write_text_file(path, attempt, text, codec)
                os.replace(attempt, target)
            yield index, rows, os.path.getsize(target), file_sha256(target)

    return facts


def sequence_numbers(storage: LandingStorage, folder: str) -> dict[int, str]:
    """Every sequence-named file of a table: number → where it is (folder relative path)."""
    return {n: path for n, (path, _) in _sequence_files(storage, folder).items()}


def _sequence_files(storage: LandingStorage, folder: str) -> dict[int, tuple[str, int]]:
    found: dict[int, tuple[str, int]] = {}
    for sub in ("", *CLEANUP_FOLDERS):
        where = join(folder, sub)
        for info in storage.list_dir(where):
            match = _SEQ_RE.match(info.name)
            if match:
                found[int(match.group(1))] = (join(where, info.name), info.size)
    return found


def known_files(manifests: Sequence[dict[str, Any]]) -> dict[int, tuple[str, int]]:
    """Number → (name, bytes) of every file in these manifests (since the last re-creation)."""
    out: dict[int, tuple[str, int]] = {}
    for manifest in manifests:
        for f in manifest.get("files") or []:
            out[int(f["sequence"])] = (f["name"], int(f["bytes"]))
    return out


def landing_changes(
    changes: DataFrame,
    keys: Sequence[str],
    columns: Sequence[str],
    *,
    initial: bool,
    upsert: bool = False,
    single_partition: bool = False,
) -> DataFrame:
    """A neutral change set (landing columns + OP) in landing order, with ``__rowMarker__`` last.

    The initial load has no marker column (the whole file is INSERT, as spec §1 recommends)
    and keeps the snapshot's own row order (deterministic for the same files; sorting a whole
    first load would cost a full shuffle for nothing). Otherwise deletes (key columns only)
    come first, then inserts and updates, each ordered by key. ``single_partition`` sorts a
    small change set in one task instead of a range shuffle (which needs a sampling pass).
    With ``upsert`` (``isUpsertDefaultRowMarker``) inserts and updates carry UPSERT (4).
    """
    if initial:
        return changes.select(*[F.col(quote(c)) for c in columns])
    op = F.col(OP)
    marker = (
        F.when(op == OP_DELETE, F.lit(MARKER_DELETE))
        .when(op == OP_INSERT, F.lit(MARKER_UPSERT if upsert else MARKER_INSERT))
        .otherwise(F.lit(MARKER_UPSERT if upsert else MARKER_UPDATE))
    )
    combined = changes.select(
        *[F.col(quote(c)) for c in columns],
        marker.alias(ROW_MARKER),
        F.when(op == OP_DELETE, 0).otherwise(1).alias(_GRP),
    )
    key_cols = [F.col(quote(k)) for k in keys]
    if single_partition:
        ordered = combined.repartition(1).sortWithinPartitions(_GRP, *key_cols)
    else:
        ordered = combined.orderBy(_GRP, *key_cols)
    return ordered.drop(_GRP)


def last_data_mtime(storage: LandingStorage, folder: str) -> float:
    """The newest modification time of a data file in the table folder (0 when none)."""
    times = [i.mtime for i in storage.list_dir(folder) if _SEQ_RE.match(i.name)]
    return max(times, default=0.0)


def check_continuation(
    storage: LandingStorage,
    folder: str,
    *,
    table: str,
    published_through: int,
    batch: set[int] | frozenset[int] = frozenset(),
    known: dict[int, tuple[str, int]] | None = None,
) -> None:
    """Refuse a landing folder that does not match what the state says was published.

    ``published_through`` is the highest sequence number this engine published for the
    table (0 for none); the next number is one more. The table folder and both cleanup
    folders are searched. Numbers above it that are not part of the batch being published
    were written by someone else; a folder without any file at or above it lost files we
    wrote (the service always keeps the last processed file). ``known`` (number → name and
    size of the files we wrote) also exposes a foreign file under one of our numbers.
    """
    found = _sequence_files(storage, folder)
    numbers = {n: path for n, (path, _) in found.items()}
    foreign = sorted(n for n in numbers if n > published_through and n not in batch)
    for number, (name, size) in sorted((known or {}).items()):
        if number in found and number <= published_through:
            path, info_size = found[number]
            if path.rsplit("/", 1)[-1] != name or info_size != size:
                foreign.insert(0, number)
                break
    where = f"{storage.describe()}/{folder}"
    if foreign:
        raise LandingZoneMismatch(
            f"landing folder holds file number {foreign[0]} that this engine never wrote "
            f"(state has published up to {published_through})",
            table=table,
            path=numbers[foreign[0]],
            hint=f"another publisher writes into {where}; stop it, or re-create the table "
            f"(diffcdc reload --table {table} --yes) to start a fresh initial load"
            if published_through
            else "nothing was published here from this state: if the table was published with "
            "another state root, run from the folder that holds it or give --state (or the "
            f"config file's state); if another publisher writes into {where}, stop it",
        )
    if published_through > 0 and not any(n >= published_through for n in numbers):
        raise LandingZoneMismatch(
            f"landing folder lost files this engine published (last was number "
            f"{published_through}; none at or above it remain)",
            table=table,
            path=where,
            hint="the table folder was deleted or re-created by someone else; re-create the "
            f"table (diffcdc reload --table {table} --yes) to publish a fresh initial load",
        )


def metadata_item(staging_dir: str, folder: str, document: dict[str, Any]) -> PublishItem:
    """Stage ``_metadata.json`` for publishing."""
    path = os.path.join(staging_dir, METADATA_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
    return PublishItem(path, join(folder, METADATA_FILE), file_sha256(path), os.path.getsize(path))


def check_published_metadata(
    storage: LandingStorage, folder: str, manifest: dict[str, Any], table: str
) -> None:
    """Before a commit: the table's ``_metadata.json`` is still the one we published.

    Someone else's edit is refused here, before anything is committed, not at publish time.
    A missing file is put back by the next publish.
    """
    ours = manifest.get("metadata_document")
    target = join(folder, METADATA_FILE)
    if ours is None or storage.stat(target) is None:
        return
    try:
        existing = json.loads(storage.read_bytes(target))
    except ValueError:
        existing = None
    if existing != ours:
        raise LandingZoneMismatch(
            f"_metadata.json in the landing zone was changed by someone else (it is "
            f"{existing}, this engine published {ours})",
            table=table,
            path=f"{storage.describe()}/{target}",
            hint="put back the published content (the table's consumer may already have read "
            f"it), or re-create the table (diffcdc reload --table {table} --yes)",
        )


def publish_metadata(storage: LandingStorage, item: PublishItem, table: str) -> None:
    """Put ``_metadata.json`` in place, or check that the one in place agrees with ours."""
    if storage.stat(item.target) is None:
        try:
            storage.put_if_absent(item.local_path, item.target)
            return
        except FileExistsError:
            pass
    try:
        existing = json.loads(storage.read_bytes(item.target))
    except ValueError:
        raise LandingZoneMismatch(
            "_metadata.json in the landing zone is not valid JSON",
            table=table,
            path=item.target,
            hint="fix or remove it (diffcdc reload re-creates the table)",
        ) from None
    with open(item.local_path, encoding="utf-8") as handle:
        ours = json.load(handle)
    if existing.get("keyColumns") != ours.get("keyColumns"):
        raise LandingZoneMismatch(
            f"keyColumns in the landing zone are {existing.get('keyColumns')}, this table has "
            f"{ours.get('keyColumns')}; keyColumns can never change once published",
            table=table,
            path=item.target,
            hint="re-create the table (diffcdc reload) to change its keys",
        )
    if existing != ours:
        fields = sorted(k for k in {*existing, *ours} if existing.get(k) != ours.get(k))
        raise LandingZoneMismatch(
            f"_metadata.json in the landing zone differs from this table's settings in "
            f"{', '.join(fields)} ({existing} vs {ours})",
            table=table,
            path=item.target,
            hint="change the table settings back, or re-create the table (diffcdc reload)",
        )


def ensure_partner_events(
    storage: LandingStorage, document: dict[str, Any], staging_dir: str, table: str
) -> bool:
    """Write ``_partnerEvents.json`` at the landing root once; refuse a different one.

    Returns True when this call created it. The spec asks for one ``partnerName`` everywhere,
    so a file with other content is an error, never overwritten.
    """
    os.makedirs(staging_dir, exist_ok=True)
    path = os.path.join(staging_dir, PARTNER_EVENTS_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
    if storage.stat(PARTNER_EVENTS_FILE) is None:
        try:
            storage.put_if_absent(path, PARTNER_EVENTS_FILE)
            return True
        except FileExistsError:
            pass
    try:
        existing = json.loads(storage.read_bytes(PARTNER_EVENTS_FILE))
    except ValueError:
        existing = None
    if existing != document:
        raise LandingZoneMismatch(
            f"{PARTNER_EVENTS_FILE} at the landing root says {json.dumps(existing)}, this "
            f"table's [partner] settings say {json.dumps(document)}",
            table=table,
            path=f"{storage.describe()}/{PARTNER_EVENTS_FILE}",
            hint="keep partner settings the same for every table of a landing zone; if the "
            "file is stale, delete it and run again",
        )
    return False
