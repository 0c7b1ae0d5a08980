"""The Open Mirroring landing zone (spec §1): table folders, ``_metadata.json``, data files.

This module stages a change set as final-named files and publishes staged files through a
:class:`~diffcdc.sinks.storage.LandingStorage`. It knows the landing contract; the storage
knows only bytes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import LandingZoneMismatch
from ..fingerprint import quote
from .storage import LandingStorage, PublishItem, file_sha256, join

#: Folders the mirroring service moves processed files into (inside the table folder).
CLEANUP_FOLDERS = ("_ProcessedFiles", "_FilesReadyToDelete")
METADATA_FILE = "_metadata.json"
_SEQ_RE = re.compile(r"^(\d{20})\.([A-Za-z0-9]+)$")
_PART_RE = re.compile(r"^part-(\d+)-.*?-c(\d+)(\..*)?$")


def table_folder(table: str, schema_name: str | None = None) -> str:
    """``<Table>`` or ``<schema>.schema/<Table>``, relative to the landing root."""
    return join(f"{schema_name}.schema", table) if schema_name else table


def data_file_name(sequence: int, extension: str = "parquet") -> str:
    return f"{sequence:020d}.{extension}"


def metadata_document(keys: Sequence[str]) -> dict[str, Any]:
    """The table's ``_metadata.json`` content."""
    return {"keyColumns": list(keys)}


def to_landing_columns(df: DataFrame) -> DataFrame:
    """Project a snapshot to landing column types.

    Complex types are written as JSON strings (spec §1); map entries are sorted by key so the
    text is stable. Everything else keeps its Spark type.
    """
    out = []
    for field in df.schema.fields:
        col = F.col(quote(field.name))
        if isinstance(field.dataType, T.MapType):
            sorted_map = F.map_from_entries(
                F.array_sort(
                    F.map_entries(col),
                    lambda left, right: F.when(left["key"] < right["key"], -1)
                    .when(left["key"] > right["key"], 1)
                    .otherwise(0),
                )
            )
            out.append(F.when(col.isNotNull(), F.to_json(sorted_map)).alias(field.name))
        elif isinstance(field.dataType, (T.StructType, T.ArrayType)):
            out.append(F.to_json(col).alias(field.name))
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
) -> list[StagedFile]:
    """Write an ordered change set with Spark and give the files their sequence names.

    Spark writes the (globally sorted) DataFrame as part files; their order (task number, then
    file counter) is the row order. Empty part files are dropped: the landing zone must never
    see an empty file.
    """
    (
        changes.write.mode("errorifexists")
        .option("compression", "uncompressed" if codec == "none" else codec)
        .option("maxRecordsPerFile", max_rows_per_file)
        .parquet(raw_dir)
    )
    parts = []
    for name in os.listdir(raw_dir):
        match = _PART_RE.match(name)
        if match and name.endswith(".parquet"):
            parts.append(((int(match.group(1)), int(match.group(2))), name))
    os.makedirs(out_dir, exist_ok=True)
    staged = []
    sequence = first_sequence
    for _, name in sorted(parts):
        path = os.path.join(raw_dir, name)
        rows = pq.ParquetFile(path).metadata.num_rows
        if rows == 0:
            continue
        final = data_file_name(sequence)
        target = os.path.join(out_dir, final)
        os.rename(path, target)
        staged.append(StagedFile(final, sequence, rows, os.path.getsize(target), file_sha256(target)))
        sequence += 1
    return staged


def sequence_numbers(storage: LandingStorage, folder: str) -> dict[int, str]:
    """Every sequence-named file of a table: number → where it is (folder relative path)."""
    found: dict[int, str] = {}
    for sub in ("", *CLEANUP_FOLDERS):
        where = join(folder, sub)
        for info in storage.list_dir(where):
            match = _SEQ_RE.match(info.name)
            if match:
                found[int(match.group(1))] = join(where, info.name)
    return found


def check_continuation(
    storage: LandingStorage,
    folder: str,
    *,
    table: str,
    published_through: int,
    batch: set[int] | frozenset[int] = frozenset(),
) -> None:
    """Refuse a landing folder that does not match what the state says was published.

    ``published_through`` is the highest sequence number this engine published for the
    table (0 for none). Numbers above it that are not part of the batch being published were
    written by someone else; a folder without any file at or above it lost files we wrote
    (the service always keeps the last processed file).
    """
    numbers = sequence_numbers(storage, folder)
    foreign = sorted(n for n in numbers if n > published_through and n not in batch)
    where = f"{storage.describe()}/{folder}"
    if foreign:
        raise LandingZoneMismatch(
            f"landing folder holds file number {foreign[0]} that this engine never wrote "
            f"(state has published up to {published_through})",
            table=table,
            path=numbers[foreign[0]],
            hint=f"another publisher writes into {where}; stop it, or re-create the table "
            "(diffcdc reload) to start a fresh initial load",
        )
    if published_through > 0 and not any(n >= published_through for n in numbers):
        raise LandingZoneMismatch(
            f"landing folder lost files this engine published (last was number "
            f"{published_through}; none at or above it remain)",
            table=table,
            path=where,
            hint="the table folder was deleted or re-created by someone else; re-create the "
            "table (diffcdc reload) to publish a fresh initial load",
        )


def metadata_item(staging_dir: str, folder: str, document: dict[str, Any]) -> PublishItem:
    """Stage ``_metadata.json`` for publishing."""
    path = os.path.join(staging_dir, METADATA_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
    return PublishItem(path, join(folder, METADATA_FILE), file_sha256(path), os.path.getsize(path))


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
        raise LandingZoneMismatch(
            f"_metadata.json in the landing zone differs from this table's settings "
            f"({existing} vs {ours})",
            table=table,
            path=item.target,
            hint="change the table settings back, or re-create the table (diffcdc reload)",
        )
