"""Vectorized Avro binary encoding of Arrow record batches (numpy; no loop over rows).

Avro's binary encoding of a record is the concatenation of its fields' encodings, with no
framing: ``int``/``long`` are zig-zag varints, ``float``/``double`` little-endian IEEE,
``boolean`` one byte, ``string``/``bytes`` a varint length then the bytes, a union the varint
branch index then the value, ``null`` nothing. A ``decimal`` on ``bytes`` is the big-endian
two's-complement unscaled value (here in its shortest form).

Every column is turned into *pieces* — per row a run of bytes, possibly empty — and the pieces
are scattered into one output buffer in field order. :func:`encode_batch` returns that buffer
and every record's end offset, so a caller can cut the records into messages anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Encodings of a field's value (see :mod:`diffcdc.sinks.kafka.schema` for the Spark side).
KINDS = ("null", "boolean", "int", "long", "float", "double", "string", "bytes", "decimal")


@dataclass(frozen=True)
class FieldPlan:
    """How one Avro field is encoded: its value kind and whether it is a ``["null", T]`` union."""

    kind: str
    nullable: bool


@dataclass
class _Piece:
    """Per-row byte runs: ``lens[i]`` bytes of ``data`` for row ``i``.

    ``data`` holds the runs of all rows back to back unless ``starts`` gives each row's offset
    into ``data`` (runs read in place out of an Arrow buffer). ``width`` > 0 means every row has
    exactly that many bytes (``lens`` is then None).
    """

    data: np.ndarray
    lens: np.ndarray | None = None
    starts: np.ndarray | None = None
    width: int = 0

    def lengths(self, n: int) -> np.ndarray:
        return np.full(n, self.width, dtype=np.int64) if self.lens is None else self.lens


_POWERS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def _varint(values: np.ndarray, valid: np.ndarray | None = None) -> _Piece:
    """Zig-zag varints of int64 ``values``; rows where ``valid`` is False get no bytes."""
    v = values.astype(np.int64, copy=False)
    zz = ((v << 1) ^ (v >> 63)).view(np.uint64)
    nbytes = np.ones(len(zz), dtype=np.int64)
    for power in _POWERS:
        big = zz >= power
        if not big.any():
            break
        nbytes += big
    if valid is not None:
        nbytes = np.where(valid, nbytes, 0)
    width = int(nbytes.max()) if len(nbytes) else 1
    if width == 1 and valid is None:
        return _Piece(zz.astype(np.uint8), width=1)
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = ((zz[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    cols = np.arange(width)[None, :]
    groups |= np.where(cols < (nbytes - 1)[:, None], np.uint8(0x80), np.uint8(0))
    return _Piece(groups[cols < nbytes[:, None]], lens=nbytes)


def _fixed(values: np.ndarray, size: int, valid: np.ndarray | None) -> _Piece:
    """Fixed-width little-endian values (float, double); no bytes where ``valid`` is False."""
    if valid is None:
        return _Piece(np.ascontiguousarray(values).view(np.uint8), width=size)
    lens = np.where(valid, size, 0).astype(np.int64)
    return _Piece(np.ascontiguousarray(values[valid]).view(np.uint8), lens=lens)


def _offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets of a (large_)string/binary array as int64, ``len(arr) + 1`` of them."""
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    buf = arr.buffers()[1]
    dtype = np.int64 if wide else np.int32
    return np.frombuffer(buf, dtype=dtype, count=len(arr) + 1, offset=arr.offset * dtype().itemsize).astype(np.int64)


def _varlen(arr: pa.Array, valid: np.ndarray | None) -> list[_Piece]:
    """A string/bytes column: varint length, then the bytes read in place from the Arrow buffer."""
    if pa.types.is_string_view(arr.type) or pa.types.is_binary_view(arr.type):
        arr = arr.cast(pa.large_binary())
    offsets = _offsets(arr)
    lens = np.diff(offsets)
    if valid is not None:
        lens = np.where(valid, lens, 0)
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return [_varint(lens, valid), _Piece(data, lens=lens, starts=offsets[:-1])]


def _decimal(arr: pa.Array, valid: np.ndarray | None) -> list[_Piece]:
    """Decimal128 → varint length + the shortest big-endian two's complement of the unscaled value."""
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=16 * n, offset=16 * arr.offset)
    be = np.ascontiguousarray(raw.reshape(n, 16)[:, ::-1])
    negative = be[:, :1] >= 0x80
    pad = np.where(negative, np.uint8(0xFF), np.uint8(0x00))
    # A leading byte is redundant when it only repeats the sign and the next byte carries it.
    redundant = (be[:, :15] == pad) & ((be[:, 1:] >= 0x80) == negative)
    skip = np.cumprod(redundant, axis=1, dtype=np.int64).sum(axis=1)
    lens = 16 - skip
    if valid is not None:
        lens = np.where(valid, lens, 0)
    starts = np.arange(n, dtype=np.int64) * 16 + skip
    return [_varint(lens, valid), _Piece(be.reshape(-1), lens=lens, starts=starts)]


def _values(arr: pa.Array, kind: str) -> np.ndarray:
    """The column as a numpy array with NULLs filled (their bytes are dropped later)."""
    if kind in ("int", "long"):
        if pa.types.is_timestamp(arr.type) or pa.types.is_date64(arr.type):
            arr = arr.view(pa.int64())
        elif pa.types.is_date32(arr.type):
            arr = arr.view(pa.int32())
        if arr.null_count:
            arr = pc.fill_null(arr, 0)
        return arr.to_numpy(zero_copy_only=False)
    if kind == "boolean":
        if arr.null_count:
            arr = pc.fill_null(arr, False)
        return arr.to_numpy(zero_copy_only=False).astype(np.uint8)
    dtype = np.dtype("<f4") if kind == "float" else np.dtype("<f8")
    if arr.null_count:
        arr = pc.fill_null(arr, 0.0)
    return arr.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _pieces(arr: pa.Array, plan: FieldPlan) -> list[_Piece]:
    n = len(arr)
    valid: np.ndarray | None = None
    out: list[_Piece] = []
    if plan.nullable:
        mask = arr.is_valid().to_numpy(zero_copy_only=False)
        out.append(_Piece(np.where(mask, np.uint8(2), np.uint8(0)), width=1))  # branch 1 / 0
        valid = None if arr.null_count == 0 else mask
    elif arr.null_count and plan.kind != "null":
        raise ValueError(f"NULL in a non-nullable field of kind {plan.kind}")
    kind = plan.kind
    if kind == "null" or n == 0:
        return out
    if kind in ("int", "long"):
        out.append(_varint(_values(arr, kind), valid))
    elif kind == "boolean":
        vals = _values(arr, kind)
        out.append(_Piece(vals, width=1) if valid is None else _fixed(vals, 1, valid))
    elif kind in ("float", "double"):
        out.append(_fixed(_values(arr, kind), 4 if kind == "float" else 8, valid))
    elif kind in ("string", "bytes"):
        out.extend(_varlen(arr, valid))
    elif kind == "decimal":
        out.extend(_decimal(arr, valid))
    else:
        raise ValueError(f"unknown field kind {kind!r}")
    return out


def encode_batch(columns: list[pa.Array], plans: list[FieldPlan]) -> tuple[np.ndarray, np.ndarray]:
    """Encode rows of ``columns`` (one Arrow array per field) as Avro records.

    Returns ``(data, ends)``: the records back to back as uint8, and each record's end offset
    in ``data`` (int64; record ``i`` spans ``ends[i-1]:ends[i]``).
    """
    n = len(columns[0]) if columns else 0
    pieces = [p for arr, plan in zip(columns, plans) for p in _pieces(arr, plan)]
    if n == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    lengths = [p.lengths(n) for p in pieces]
    row_len = np.sum(lengths, axis=0, dtype=np.int64) if lengths else np.zeros(n, np.int64)
    ends = np.cumsum(row_len)
    out = np.empty(int(ends[-1]) if n else 0, dtype=np.uint8)
    at = ends - row_len  # where the next piece of every row goes
    for piece, lens in zip(pieces, lengths):
        if piece.width and piece.lens is None and piece.starts is None:
            # Same width in every row: a 2-D scatter without per-byte index arithmetic.
            idx = at[:, None] + np.arange(piece.width, dtype=np.int64)[None, :]
            out[idx] = piece.data.reshape(n, piece.width)
        else:
            total = int(lens.sum())
            if total:
                src_start = piece.starts if piece.starts is not None else np.cumsum(lens) - lens
                run_start = np.cumsum(lens) - lens
                step = np.arange(total, dtype=np.int64)
                within = step - np.repeat(run_start, lens)
                src = piece.data if piece.starts is None else piece.data[np.repeat(src_start, lens) + within]
                out[np.repeat(at, lens) + within] = src
        at = at + lens
    return out, ends
