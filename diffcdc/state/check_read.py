"""The two sides of a state check, read in batches with pyarrow (no Spark).

A side is reduced to numpy arrays, one entry per row in stream order: a 64-bit digest of the
key and the fingerprint column(s). Only those arrays are kept (8 bytes per row per array; a
state chain's rows also keep their link number and three flags while the chain is resolved,
7 bytes more); rows are read and hashed one batch at a time. Batches come out in the same order on every
read (single-threaded scans), so a row is found again by its position (:func:`key_rows`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import xxhash
from pyspark.sql import types as T

from diffcdc.core.arrow_types import spark_type
from diffcdc.core.classify import CHANGE, DELETE, DUP, KEPT
from diffcdc.core.fingerprint import fingerprint_columns
from diffcdc.core.fingerprint_ref import SEED, RowFingerprinter, canon_hasher, java_bytes
from diffcdc.core.normalize import NO_RULES, Normalizers
from diffcdc.errors import InputRefused, StateError
from diffcdc.storage import paths

BATCH_ROWS = 65_536
_NULL, _VALUE = b"\x01", b"\x00"
_xxh = xxhash.xxh64_intdigest


def arrow_values(column: pa.Array) -> list[Any]:
    """The values of an Arrow column in the cheapest form its hasher takes.

    ``to_pylist()``, except for the types whose Python objects are slow to build: timestamps
    as int microseconds, dates as int days and decimals as the exact bytes their hash takes
    (every hasher accepts both forms). Converting a tz-aware timestamp to a datetime alone
    costs ~7 µs, more than hashing a whole row of ten columns.
    """
    t = column.type
    if pa.types.is_timestamp(t):
        return column.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).to_pylist()
    if pa.types.is_date(t):
        return column.cast(pa.date32()).cast(pa.int32()).to_pylist()
    if not (pa.types.is_decimal128(t) and len(column)):
        return column.to_pylist()
    words = np.frombuffer(column.buffers()[1], "<i8")[2 * column.offset : 2 * (column.offset + len(column))]
    if t.precision <= 18:
        raw = words[0::2].tobytes()  # the low word: the unscaled long, little-endian
        out: list[Any] = [raw[i : i + 8] for i in range(0, len(raw), 8)]
    else:
        raw = words.tobytes()
        out = [java_bytes(int.from_bytes(raw[i : i + 16], "little", signed=True)) for i in range(0, len(raw), 16)]
    if column.null_count:
        for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
            out[i] = None
    return out


class KeyDigest:
    """A 64-bit digest of a key tuple, canonical per Spark type.

    Values are hashed as the fingerprint hashes them (an int and a bigint 5 alike, one instant
    in any time zone alike), so a key read from the snapshot and the same key written by Spark
    into the state digest equal. A NULL part has its own marker.
    """

    def __init__(self, dtypes: Sequence[T.DataType]) -> None:
        self._hashers = [canon_hasher(t) for t in dtypes]

    def __call__(self, values: Sequence[Any]) -> int:
        seed = SEED
        for hasher, value in zip(self._hashers, values):
            if value is None or hasher is None:
                seed = _xxh(_NULL, seed)
            else:
                seed = hasher(value, _xxh(_VALUE, seed))
        return seed


@dataclass
class Side:
    """Key digests (uint64) and fingerprints (int64, one array per column) of one side."""

    digests: np.ndarray
    fps: list[np.ndarray]

    @property
    def rows(self) -> int:
        return len(self.digests)


def parquet_dataset(path: str, schema: pa.Schema | None = None) -> ds.Dataset:
    """A Parquet file or folder (hidden and ``_`` files skipped, as Spark skips them).

    Legacy INT96 timestamps are read as microseconds (pyarrow's default, nanoseconds, is not
    a type Spark reads; Spark reads INT96 as a timestamp). No pre-buffering: with it (and the
    scanner's read-ahead, see :func:`_scan`) a 5M-row scan peaked ~200 MB higher.
    """
    fmt = ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"),
        # page_checksum_verification: a page whose CRC the writer recorded is checked
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(
            pre_buffer=False, page_checksum_verification=True),
    )
    filesystem, inner = paths.arrow_source(path)  # a state folder may be at a URL
    return ds.dataset(inner, format=fmt, filesystem=filesystem, schema=schema)


def _scan(
    path: str, columns: Sequence[str], batch_rows: int, schema: pa.Schema | None = None
) -> Iterator[pa.RecordBatch]:
    """Batches of a Parquet dataset in file order, one at a time (no read-ahead, no threads)."""
    return parquet_dataset(path, schema).to_batches(
        columns=list(columns),
        batch_size=batch_rows,
        use_threads=False,
        batch_readahead=0,
        fragment_readahead=0,
    )


def resolve(schema: pa.Schema, wanted: Sequence[str], path: str) -> list[str]:
    """The column names of ``schema`` matching ``wanted`` case-insensitively."""
    by_lower = {n.lower(): n for n in schema.names}
    missing = [w for w in wanted if w.lower() not in by_lower]
    if missing:
        raise InputRefused(f"no column(s) {', '.join(missing)}", path=path)
    return [by_lower[w.lower()] for w in wanted]


def snapshot_schema(path: str, kind: str, encoding: str = "utf-8") -> pa.Schema:
    """The snapshot's columns; a CSV file's are all strings (header row), as Spark reads it."""
    if kind == "csv":
        with open(path, newline="", encoding=encoding) as handle:
            header = next(csv.reader(handle), None)
        if not header:
            raise InputRefused("CSV snapshot has no header row", path=path)
        return pa.schema([(name, pa.string()) for name in header])
    if kind != "parquet":
        raise ValueError(f"snapshot kind must be 'parquet' or 'csv', not {kind!r}")
    return parquet_dataset(path).schema


def snapshot_batches(
    path: str,
    kind: str,
    columns: Sequence[str],
    batch_rows: int = BATCH_ROWS,
    encoding: str = "utf-8",
) -> Iterator[pa.RecordBatch]:
    """The snapshot's ``columns`` in batches (CSV: every value a string, empty → NULL)."""
    if kind == "csv":
        schema = snapshot_schema(path, kind, encoding)
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=1 << 22, use_threads=False, encoding=encoding),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in schema.names},
                include_columns=list(columns),
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
                null_values=[""],
            ),
        )
        yield from reader
        return
    yield from _scan(path, columns, batch_rows)


def chain_batches(
    chain: Sequence[str], columns: Sequence[str], batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Every row (tombstones too) of a state chain's folders, base first, in stream order."""
    schema = parquet_dataset(chain[0]).schema
    for path in chain:
        yield from _scan(path, columns, batch_rows, schema)


def _columns(batch: pa.RecordBatch, names: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The rows of ``batch`` restricted to ``names``, as tuples of Python values."""
    if not names:
        return repeat((), batch.num_rows)
    return zip(*[arrow_values(batch.column(n)) for n in names])


@dataclass
class StateSide:
    """The live rows of a state (its chain resolved) as a :class:`Side`, with what else was
    counted."""

    path: str  #: the state's own folder (the newest link)
    side: Side
    key_columns: list[str]
    tombstones: int  #: tombstones in the state's own folder
    bad_row_counts: int  #: live rows whose ``__diffcdc_n`` is not 1
    null_fingerprints: int  #: live rows with a NULL fingerprint (Spark never computes one)
    chain: list[str] = field(default_factory=list)  #: every folder, base first
    #: Each live row's position among every row of the chain's folders (tombstones included).
    positions: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    own_rows: int = 0  #: rows in the state's own folder, tombstones included
    #: Live rows of keys kept outside a scoped snapshot's scope (:mod:`diffcdc.core.scope`):
    #: live, but no row of the version's snapshot is theirs, so not in ``side``.
    kept: int = 0


def read_state(
    path: str | Sequence[str], keys: Sequence[str], bits: int, batch_rows: int = BATCH_ROWS
) -> StateSide:
    """The live side of a state: one folder, or a chain of them, base first (see
    :mod:`diffcdc.state.chain`): per key the newest folder's rows count, and a key whose newest
    row is a tombstone is not live. Rows of the newest folder that share a key all stay, so a
    duplicate shows. A scoped state's kept keys are counted, not compared (:attr:`StateSide.kept`)."""
    chain = [path] if isinstance(path, str) else list(path)
    for folder in chain:
        if not paths.isdir(folder):
            raise StateError("state folder does not exist", path=folder)
    schema = parquet_dataset(chain[0]).schema  # every link is read with the base's columns
    key_cols = resolve(schema, keys, chain[0])
    fp_cols = fingerprint_columns(bits)
    resolve(schema, [*fp_cols, CHANGE, DUP], chain[0])
    digest = KeyDigest([spark_type(schema.field(k).type) for k in key_cols])
    digests: list[np.ndarray] = []
    links: list[np.ndarray] = []
    dead: list[np.ndarray] = []
    outside: list[np.ndarray] = []
    single: list[np.ndarray] = []
    fps: list[list[np.ndarray]] = [[] for _ in fp_cols]
    nulls: list[np.ndarray] = []
    own_rows = 0
    for number, folder in enumerate(chain):
        for batch in _scan(folder, [*key_cols, *fp_cols, CHANGE, DUP], batch_rows, schema):
            own_rows += batch.num_rows if number == len(chain) - 1 else 0
            digests.append(np.fromiter(map(digest, _columns(batch, key_cols)), np.uint64, batch.num_rows))
            links.append(np.full(batch.num_rows, number, np.int32))
            dead.append(pc.equal(batch.column(CHANGE), DELETE).to_numpy(zero_copy_only=False))
            outside.append(pc.equal(batch.column(CHANGE), KEPT).to_numpy(zero_copy_only=False))
            single.append(pc.fill_null(pc.equal(batch.column(DUP), 1), False).to_numpy(zero_copy_only=False))
            null = np.zeros(batch.num_rows, bool)
            for out, col in zip(fps, fp_cols):
                null |= batch.column(col).is_null().to_numpy(zero_copy_only=False)
                out.append(pc.fill_null(batch.column(col), 0).to_numpy(zero_copy_only=False).astype(np.int64))
            nulls.append(null)
    every = _side(digests, fps)
    link = np.concatenate(links) if links else np.empty(0, np.int32)
    tomb = np.concatenate(dead) if dead else np.empty(0, bool)
    out_of_scope = np.concatenate(outside) if outside else np.empty(0, bool)
    live = ~tomb & _newest(every.digests, link)
    kept = np.flatnonzero(live & ~out_of_scope)
    own = link == len(chain) - 1
    return StateSide(
        chain[-1],
        Side(every.digests[kept], [f[kept] for f in every.fps]),
        key_cols,
        tombstones=int(np.count_nonzero(tomb & own)),
        bad_row_counts=int(np.count_nonzero(~np.concatenate(single)[kept])) if single else 0,
        null_fingerprints=int(np.count_nonzero(np.concatenate(nulls)[kept])) if nulls else 0,
        chain=chain,
        positions=kept.astype(np.int64),
        own_rows=own_rows,
        kept=int(np.count_nonzero(live & out_of_scope)),
    )


def _newest(digests: np.ndarray, link: np.ndarray) -> np.ndarray:
    """Per row: whether it is in the newest link that has its key."""
    if not len(digests):
        return np.zeros(0, bool)
    order = np.lexsort((link, digests))
    ordered = digests[order]
    last = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))  # each key's last row
    group = np.cumsum(np.concatenate(([0], (ordered[1:] != ordered[:-1]).astype(np.int64))))
    newest = link[order][last][group]
    out = np.empty(len(digests), bool)
    out[order] = link[order] == newest
    return out


def read_snapshot(
    path: str,
    kind: str,
    keys: Sequence[str],
    exclude: Sequence[str],
    bits: int,
    batch_rows: int = BATCH_ROWS,
    encoding: str = "utf-8",
    normalize: Normalizers = NO_RULES,
) -> tuple[Side, list[str]]:
    """Key digests and reference fingerprints of every snapshot row, and its key columns."""
    schema = snapshot_schema(path, kind, encoding)
    key_cols = resolve(schema, keys, path)
    digest = KeyDigest([spark_type(schema.field(k).type) for k in key_cols])
    fingerprint = RowFingerprinter(schema, key_cols, exclude, bits, normalize)
    digests: list[np.ndarray] = []
    fps: list[list[np.ndarray]] = [[] for _ in range(bits // 64)]
    columns = list(dict.fromkeys([*key_cols, *fingerprint.columns]))
    for batch in snapshot_batches(path, kind, columns, batch_rows, encoding):
        digests.append(np.fromiter(map(digest, _columns(batch, key_cols)), np.uint64, batch.num_rows))
        values = list(map(fingerprint.from_values, _columns(batch, fingerprint.columns)))
        for i, out in enumerate(fps):
            out.append(np.fromiter((v[i] for v in values), np.int64, batch.num_rows))
    return _side(digests, fps), key_cols


def _side(digests: list[np.ndarray], fps: Sequence[Sequence[np.ndarray]]) -> Side:
    empty_u, empty_i = np.empty(0, np.uint64), np.empty(0, np.int64)
    return Side(
        np.concatenate(digests) if digests else empty_u,
        [np.concatenate(list(f)) if f else empty_i for f in fps],
    )


def key_rows(
    batches: Iterator[pa.RecordBatch], key_cols: Sequence[str], positions: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """The key values of the rows at ``positions`` (in stream order), ``{position: {col: v}}``."""
    wanted = np.unique(np.asarray(positions, dtype=np.int64))
    found: dict[int, dict[str, Any]] = {}
    if not len(wanted):
        return found
    offset = 0
    for batch in batches:
        here = wanted[(wanted >= offset) & (wanted < offset + batch.num_rows)]
        if len(here):
            rows = batch.select(list(key_cols)).take(pa.array(here - offset)).to_pylist()
            found.update(zip(here.tolist(), rows))
        offset += batch.num_rows
        if offset > wanted[-1]:
            break
    return found
