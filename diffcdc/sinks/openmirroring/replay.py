"""Reference applier: replay a table's landing files with Open Mirroring semantics (spec §1).

Deliberately simple and independent of the engine's diff: rows are kept per key in plain
Python, files are applied in sequence order, rows in file order, with the marker table of the
spec — INSERT does no duplicate check (a second INSERT of a key gives two rows), UPDATE of an
absent key inserts, DELETE of an absent key does nothing, UPSERT inserts or updates. A file
without ``__rowMarker__`` is all INSERT (all UPSERT with ``isUpsertDefaultRowMarker``).

The result is compared with a snapshot by :func:`diffcdc.core.compare.compare`.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from diffcdc.core.compare import Replayed, arrow_rows, norm_value
from diffcdc.errors import LandingZoneMismatch
from diffcdc.sinks.openmirroring.contract import sequence_numbers
from diffcdc.sinks.openmirroring.landing import read_file
from diffcdc.sinks.openmirroring.metadata import METADATA_FILE
from diffcdc.sinks.openmirroring.rows import (
    MARKER_DELETE,
    MARKER_INSERT,
    MARKER_UPDATE,
    MARKER_UPSERT,
    ROW_MARKER,
)
from diffcdc.sinks.openmirroring.text_read import coerce, read_text_file
from diffcdc.storage.base import ByteStore, join


@dataclass
class MirrorTable:
    """The replayed table: rows per key, in the order they were applied."""

    keys: list[str]
    columns: list[str] = field(default_factory=list)
    rows: dict[tuple[Any, ...], list[dict[str, Any]]] = field(default_factory=dict)
    files: int = 0
    #: Delimited text: column → declared DataType (snapshot values are compared as that type).
    types: dict[str, str] = field(default_factory=dict)

    def apply(self, row: dict[str, Any], marker: int) -> None:
        key = tuple(norm_value(row.get(k)) for k in self.keys)
        for name in row:
            if name not in self.columns:
                self.columns.append(name)
        present = self.rows.get(key)
        if marker == MARKER_INSERT:
            self.rows.setdefault(key, []).append(row)
        elif marker in (MARKER_UPDATE, MARKER_UPSERT):
            if present:
                self.rows[key] = [{**old, **row} for old in present]
            else:
                self.rows[key] = [row]
        elif marker == MARKER_DELETE:
            self.rows.pop(key, None)
        else:
            raise LandingZoneMismatch(f"unknown row marker {marker!r}")

    def replayed(self) -> Replayed:
        """The replayed rows in the form every sink's replay has."""
        types = self.types
        return Replayed(
            keys=self.keys,
            columns=self.columns,
            rows=[row for rows in self.rows.values() for row in rows],
            units=self.files,
            normalize=(lambda row: {c: coerce(v, types.get(c, "String")) for c, v in row.items()})
            if types
            else None,
        )


def replay(storage: ByteStore, folder: str, upto: int | None = None) -> MirrorTable:
    """Apply every landing file of a table in order (only files numbered ``<= upto``)."""
    meta_bytes = _read(storage, join(folder, METADATA_FILE))
    meta = json.loads(meta_bytes)
    upsert_default = bool(meta.get("isUpsertDefaultRowMarker"))
    table = MirrorTable(keys=list(meta.get("keyColumns") or []))
    text_ext = meta.get("FileExtension") if meta.get("SchemaDefinition") or meta.get("FileExtension") else None
    if text_ext:
        table.types = {c["Name"]: c["DataType"] for c in meta.get("SchemaDefinition", {}).get("Columns", [])}
    if not table.keys:
        raise LandingZoneMismatch("_metadata.json has no keyColumns", path=join(folder, METADATA_FILE))
    numbers = sequence_numbers(storage, folder)
    for number in sorted(numbers):
        if upto is not None and number > upto:
            break
        path = numbers[number]
        extension = path.rsplit(".", 1)[-1]
        if text_ext:
            if extension != text_ext:
                raise LandingZoneMismatch(
                    f"file extension {extension!r} differs from FileExtension {text_ext!r}", path=path
                )
            rows = read_text_file(_read(storage, path), meta)
        elif extension == "parquet":
            try:
                rows = arrow_rows(pq.read_table(io.BytesIO(_read(storage, path)),
                                                page_checksum_verification=True))
            except pa.ArrowException as exc:  # a damaged or foreign file in the folder
                raise LandingZoneMismatch(
                    f"landing file is not readable Parquet: {' '.join(str(exc).split())}",
                    path=path,
                    hint="the file was damaged or written by someone else: stop that writer; "
                    "'diffcdc run' refuses the folder and names the reload that replaces it",
                ) from None
        else:
            raise LandingZoneMismatch("a text file, but _metadata.json declares no FileExtension", path=path)
        default = MARKER_UPSERT if upsert_default else MARKER_INSERT
        for row in rows:
            marker = row.pop(ROW_MARKER, None)
            table.apply(row, default if marker is None else int(marker))
        table.files += 1
    return table


def _read(storage: ByteStore, path: str) -> bytes:
    try:
        return read_file(storage, path)
    except (FileNotFoundError, OSError) as exc:
        raise LandingZoneMismatch(f"cannot read {path}: {exc}", path=path) from None
