"""Reference applier: replay a table's landing files with Open Mirroring semantics (spec §1).

Deliberately simple and independent of the engine's diff: rows are kept per key in plain
Python, files are applied in sequence order, rows in file order, with the marker table of the
spec — INSERT does no duplicate check (a second INSERT of a key gives two rows), UPDATE of an
absent key inserts, DELETE of an absent key does nothing, UPSERT inserts or updates. A file
without ``__rowMarker__`` is all INSERT (all UPSERT with ``isUpsertDefaultRowMarker``).

The result is compared with a snapshot as a multiset of rows over the snapshot's columns.
"""

from __future__ import annotations

import decimal
import io
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from diffcdc.core.classify import (
    MARKER_DELETE,
    MARKER_INSERT,
    MARKER_UPDATE,
    MARKER_UPSERT,
    ROW_MARKER,
)
from diffcdc.errors import InputRefused, LandingZoneMismatch
from diffcdc.sinks.openmirroring.contract import METADATA_FILE, sequence_numbers, to_landing_columns
from diffcdc.sinks.openmirroring.text import coerce, read_text_file
from diffcdc.sinks.storage.base import LandingStorage, join
from diffcdc.sources.files import SnapshotEntry, read_snapshot


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
        key = tuple(_norm(row.get(k)) for k in self.keys)
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

    def row_tuples(self, columns: Sequence[str]) -> Counter[tuple[Any, ...]]:
        return Counter(
            tuple(_norm(row.get(c)) for c in columns) for rows in self.rows.values() for row in rows
        )


def _norm(value: Any) -> Any:
    """A comparable, hashable form of a value (NaN equals NaN; -0.0 equals 0.0)."""
    if isinstance(value, float):
        if math.isnan(value):
            return ("NaN",)
        return 0.0 if value == 0 else value
    if isinstance(value, decimal.Decimal):
        return value.normalize() if value == value else ("NaN",)
    if isinstance(value, list):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    return value


def replay(storage: LandingStorage, folder: str, upto: int | None = None) -> MirrorTable:
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
            rows = pq.read_table(io.BytesIO(_read(storage, path))).to_pylist()
        else:
            raise LandingZoneMismatch("a text file, but _metadata.json declares no FileExtension", path=path)
        default = MARKER_UPSERT if upsert_default else MARKER_INSERT
        for row in rows:
            marker = row.pop(ROW_MARKER, None)
            table.apply(row, default if marker is None else int(marker))
        table.files += 1
    return table


def _read(storage: LandingStorage, path: str) -> bytes:
    try:
        return storage.read_bytes(path)
    except (FileNotFoundError, OSError) as exc:
        raise LandingZoneMismatch(f"cannot read {path}: {exc}", path=path) from None


@dataclass
class VerifyResult:
    """The outcome of comparing a replayed table with a snapshot."""

    identical: bool
    mirror_rows: int
    snapshot_rows: int
    files: int
    columns: list[str]
    missing: list[Any]  # keys of snapshot rows the mirror lacks (or has different)
    unexpected: list[Any]  # keys of mirror rows not in the snapshot (or different)

    def to_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "mirror_rows": self.mirror_rows,
            "snapshot_rows": self.snapshot_rows,
            "files": self.files,
            "columns": self.columns,
            "missing_sample": [repr(k) for k in self.missing],
            "unexpected_sample": [repr(k) for k in self.unexpected],
        }


def compare(
    mirror: MirrorTable,
    snapshot_rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    ignore: Sequence[str] = (),
    sample: int = 5,
) -> VerifyResult:
    """Compare the replayed table with snapshot rows as multisets over ``columns``."""
    skip = {c.lower() for c in ignore}
    cols = [c for c in columns if c.lower() not in skip]
    if mirror.types:
        snapshot_rows = (
            {c: coerce(v, mirror.types.get(c, "String")) for c, v in r.items()} for r in snapshot_rows
        )
    expected = Counter(tuple(_norm(r.get(c)) for c in cols) for r in snapshot_rows)
    actual = mirror.row_tuples(cols)
    key_idx = [cols.index(k) for k in mirror.keys if k in cols]
    only_expected = expected - actual
    only_actual = actual - expected

    def keys_of(counter: Counter[tuple[Any, ...]]) -> list[Any]:
        out = []
        for row in list(counter)[:sample]:
            key = tuple(row[i] for i in key_idx)
            out.append(key[0] if len(key) == 1 else key)
        return out

    return VerifyResult(
        identical=not only_expected and not only_actual,
        mirror_rows=sum(actual.values()),
        snapshot_rows=sum(expected.values()),
        files=mirror.files,
        columns=cols,
        missing=keys_of(only_expected),
        unexpected=keys_of(only_actual),
    )


def verify_snapshot(
    spark: SparkSession,
    storage: LandingStorage,
    folder: str,
    snapshot_path: str,
    *,
    ignore: Sequence[str] = (),
    infer_csv: bool = False,
) -> VerifyResult:
    """Replay a table's landing files and compare the result with a snapshot file/folder."""
    if not os.path.exists(snapshot_path):
        raise InputRefused("snapshot not found", path=snapshot_path)
    kind = "csv" if snapshot_path.lower().endswith(".csv") else "parquet"
    entry = SnapshotEntry(os.path.basename(snapshot_path.rstrip("/")), snapshot_path, kind)
    df = to_landing_columns(read_snapshot(spark, entry, infer_csv=infer_csv))
    mirror = replay(storage, folder)
    return compare(mirror, df.toArrow().to_pylist(), df.columns, ignore)
