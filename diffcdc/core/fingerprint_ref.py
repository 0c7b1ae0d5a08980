"""A pure-Python reference of the row fingerprint: no Spark, bit for bit the same values.

:mod:`diffcdc.core.fingerprint` builds the fingerprint from Spark expressions over Spark's
``xxhash64``. This module computes the same numbers from plain Python values (as pyarrow's
``to_pylist()`` returns them), so a checker can verify a state version against a snapshot
without a JVM. It is written from the spec in that module's docstring and from Spark's
``XxHash64Function`` (``org.apache.spark.sql.catalyst.expressions.hash``), not by calling it:

* ``XXH64.hashInt(i, seed)`` is standard XXH64 of the 4 little-endian bytes of ``i`` and
  ``hashLong`` of the 8 bytes of a long; strings hash their UTF-8 bytes, binary its bytes
  (``hashUnsafeBytes`` is standard XXH64 too), so ``xxhash.xxh64_intdigest`` does the work.
* ``xxhash64(a, b, ...)`` starts from seed 42, hashes each argument with the previous hash as
  its seed and leaves the seed unchanged for a NULL; a struct folds its fields the same way,
  an array its elements. Booleans are ints 0/1, dates ints (days), timestamps longs (µs).
* Normalizers (:mod:`diffcdc.core.normalize`) apply to a value before it is hashed, by
  :func:`~diffcdc.core.normalize.python_normalizer`, the mirror of the Spark SQL.
* A double hashes ``doubleToLongBits`` (one canonical NaN), -0.0 as 0; a decimal of precision
  ≤ 18 hashes its unscaled long, a wider one the unscaled value's big-endian two's-complement
  bytes, minimal length (Java's ``BigInteger.toByteArray``).

The hash of a value is computed by a per-type closure built once per schema (see
:class:`RowFingerprinter`); hashes are unsigned inside and signed 64-bit longs (as Spark
returns them) outside.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

import pyarrow as pa
import xxhash
from pyspark.sql import types as T

from diffcdc.core.arrow_types import spark_schema
from diffcdc.core.normalize import NO_RULES, Normalizers, normalized_type, python_normalizer

#: A hasher: (a non-NULL value, seed) → hash, both unsigned 64-bit ints.
Hasher = Callable[[Any, int], int]

SEED = 42
_HI_SALT = b"diffcdc-fp-hi"
_xxh = xxhash.xxh64_intdigest
_pack_int = struct.Struct("<i").pack
_pack_long = struct.Struct("<q").pack
_pack_double = struct.Struct("<d").pack
_NAN = _pack_long(0x7FF8000000000000)  # Double.doubleToLongBits(NaN)
_TRUE, _FALSE = _pack_int(1), _pack_int(0)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICRO = dt.timedelta(microseconds=1)
_DECIMAL_CONTEXT = Context(prec=100, rounding=ROUND_HALF_UP)


def signed(value: int) -> int:
    """An unsigned 64-bit hash as the signed long Spark returns."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _hash_long(value: int, seed: int) -> int:
    return _xxh(_pack_long(value), seed)


def _hash_bool(value: bool, seed: int) -> int:
    return _xxh(_TRUE if value else _FALSE, seed)


def _hash_double(value: float, seed: int) -> int:
    x = float(value)
    return _xxh(_NAN if x != x else _pack_double(x + 0.0), seed)  # x + 0.0: -0.0 → 0.0


def _hash_string(value: str, seed: int) -> int:
    return _xxh(value.encode("utf-8"), seed)


def _hash_binary(value: bytes, seed: int) -> int:
    return _xxh(bytes(value), seed)


def _hash_date(value: dt.date | int, seed: int) -> int:
    days = value if isinstance(value, int) else value.toordinal() - _EPOCH_DAY
    return _xxh(_pack_int(days), seed)


def micros(value: dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is read as UTC (Spark's session zone)."""
    return (value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)) // _MICRO


def _hash_timestamp(value: dt.datetime | int, seed: int) -> int:
    return _xxh(_pack_long(value if isinstance(value, int) else micros(value)), seed)


def unscaled(value: Decimal | int, scale: int) -> int:
    """The unscaled integer of ``value`` at ``scale`` (half-up, as Spark changes precision)."""
    if isinstance(value, int):
        return value * 10**scale
    return int(value.scaleb(scale, _DECIMAL_CONTEXT).to_integral_value(context=_DECIMAL_CONTEXT))


def java_bytes(value: int) -> bytes:
    """``BigInteger.toByteArray()``: minimal big-endian two's complement, sign bit included."""
    bits = value.bit_length() if value >= 0 else (~value).bit_length()
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def _decimal_hasher(dtype: T.DecimalType) -> Hasher:
    """Bytes are taken as the hash input already made (see :func:`diffcdc.state.check_read.arrow_values`)."""
    scale, wide = dtype.scale, dtype.precision > 18

    def hasher(value: Decimal | int | bytes, seed: int) -> int:
        if isinstance(value, bytes):
            return _xxh(value, seed)
        u = unscaled(value, scale)
        return _xxh(java_bytes(u) if wide else _pack_long(u), seed)

    return hasher


_ATOMIC: list[tuple[tuple[type, ...], Hasher]] = [
    ((T.ByteType, T.ShortType, T.IntegerType, T.LongType), _hash_long),
    ((T.FloatType, T.DoubleType), _hash_double),
    ((T.StringType, T.CharType, T.VarcharType), _hash_string),
    ((T.BinaryType,), _hash_binary),
    ((T.BooleanType,), _hash_bool),
    ((T.DateType,), _hash_date),
    ((T.TimestampType, T.TimestampNTZType), _hash_timestamp),
]


def canon_hasher(dtype: T.DataType) -> Hasher | None:
    """The hasher of ``canon(value)`` for non-NULL values of ``dtype``; None for void."""
    if isinstance(dtype, T.NullType):
        return None
    for types, hasher in _ATOMIC:
        if isinstance(dtype, types):
            return hasher
    if isinstance(dtype, T.DecimalType):
        return _decimal_hasher(dtype)
    if isinstance(dtype, T.StructType):
        return _struct_hasher(dtype)
    if isinstance(dtype, T.ArrayType):
        return _array_hasher(dtype)
    if isinstance(dtype, T.MapType):
        return _map_hasher(dtype)
    raise TypeError(f"the fingerprint reference does not support {dtype.simpleString()}")


def _struct_hasher(dtype: T.StructType) -> Hasher:
    """Fields sorted by name, each an element ``(name, canon(value))``; NULL fields skipped."""
    fields = [
        (f.name, f.name.encode("utf-8"), canon_hasher(f.dataType))
        for f in sorted(dtype.fields, key=lambda f: f.name)
    ]
    kept = [(name, label, h) for name, label, h in fields if h is not None]
    if not kept:
        return lambda v, s: _xxh(_FALSE, s)  # lit(0): an int 0

    def hasher(value: Mapping[str, Any], seed: int) -> int:
        for name, label, h in kept:
            x = value.get(name)
            if x is not None:
                seed = h(x, _xxh(label, seed))
        return seed

    return hasher


def _items_hasher(item: Hasher | None) -> Callable[[Any, int], int]:
    """One ``(is_null, canon(x))`` element of an array (or a map entry's value)."""

    def hasher(x: Any, seed: int) -> int:
        if x is None:
            return _xxh(_TRUE, seed)
        seed = _xxh(_FALSE, seed)
        return seed if item is None else item(x, seed)

    return hasher


def _array_hasher(dtype: T.ArrayType) -> Hasher:
    """``(size, [(is_null, canon(x)) for x])``."""
    element = _items_hasher(canon_hasher(dtype.elementType))

    def hasher(value: Sequence[Any], seed: int) -> int:
        seed = _xxh(_pack_int(len(value)), seed)
        for x in value:
            seed = element(x, seed)
        return seed

    return hasher


def _map_hasher(dtype: T.MapType) -> Hasher:
    """``(size, [(canon(k), is_null(v), canon(v)) for entries sorted by key])``."""
    key = canon_hasher(dtype.keyType)
    if key is None:
        raise TypeError("a map with a void key type cannot be fingerprinted")
    order = sort_key(dtype.keyType)
    value_hasher = _items_hasher(canon_hasher(dtype.valueType))

    def hasher(value: Mapping[Any, Any] | Sequence[tuple[Any, Any]], seed: int) -> int:
        entries = list(value.items()) if isinstance(value, Mapping) else list(value)
        entries.sort(key=lambda entry: order(entry[0]))  # stable, as Spark's array_sort
        seed = _xxh(_pack_int(len(entries)), seed)
        for k, v in entries:
            seed = value_hasher(v, key(k, seed))
        return seed

    return hasher


def sort_key(dtype: T.DataType) -> Callable[[Any], Any]:
    """A Python sort key ordering non-NULL values of ``dtype`` as Spark's ``<`` does.

    Doubles: NaN after everything, -0.0 equal to 0.0. Structs compare field by field in
    declared order, arrays element by element then by length; NULLs sort first in both.
    """
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return lambda x: (1, 0.0) if math.isnan(x) else (0, x + 0.0)
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return micros
    if isinstance(dtype, T.BinaryType):
        return bytes
    if isinstance(dtype, T.StructType):
        parts = [(f.name, sort_key(f.dataType)) for f in dtype.fields]
        return lambda x: tuple((0,) if x.get(n) is None else (1, k(x.get(n))) for n, k in parts)
    if isinstance(dtype, T.ArrayType):
        inner = sort_key(dtype.elementType)
        return lambda x: tuple((0,) if e is None else (1, inner(e)) for e in x)
    return lambda x: x


class RowFingerprinter:
    """The fingerprint of rows of one schema, compiled once (the reference's fast path)."""

    def __init__(
        self,
        schema: pa.Schema | T.StructType,
        keys: Sequence[str],
        exclude: Sequence[str] = (),
        bits: int = 64,
        normalize: Normalizers = NO_RULES,
    ) -> None:
        if bits not in (64, 128):
            raise ValueError(f"fingerprint bits must be 64 or 128, not {bits}")
        skip = {c.lower() for c in keys} | {c.lower() for c in exclude}
        fields = sorted(
            (f for f in spark_schema(schema).fields if f.name.lower() not in skip),
            key=lambda f: f.name,
        )
        #: The hashed columns, in fingerprint order: the values :meth:`from_values` takes.
        self.columns = [f.name for f in fields]
        self.bits = bits
        self._elements = [(f.name.encode("utf-8"), canon_hasher(f.dataType)) for f in fields]
        #: Per hashed column: its normalizer (:mod:`diffcdc.core.normalize`), or None.
        self._normalizers = [python_normalizer(normalize.get(f.name), f.dataType) for f in fields]
        if any(self._normalizers):
            self._elements = [
                (label, canon_hasher(normalized_type(normalize.get(f.name), f.dataType)))
                for (label, _), f in zip(self._elements, fields)]
        else:
            self._normalizers = []
        self._hi_seed = _xxh(_HI_SALT, SEED)

    def _fold(self, values: Sequence[Any], seed: int) -> int:
        for (label, hasher), value in zip(self._elements, values):
            if value is not None and hasher is not None:
                seed = hasher(value, _xxh(label, seed))
        return seed

    def _normalized(self, values: Sequence[Any]) -> Sequence[Any]:
        return [v if n is None or v is None else n(v) for n, v in zip(self._normalizers, values)]

    def from_values(self, values: Sequence[Any]) -> tuple[int, ...]:
        """The fingerprint of the hashed column values given in :attr:`columns` order."""
        if self._normalizers:
            values = self._normalized(values)
        low = signed(self._fold(values, SEED))
        if self.bits == 64:
            return (low,)
        return low, signed(self._fold(values, self._hi_seed))

    def __call__(self, row: Mapping[str, Any]) -> tuple[int, ...]:
        """The fingerprint of a row given as ``{column: value}`` (missing columns are NULL)."""
        return self.from_values([row.get(c) for c in self.columns])


def fingerprint_ref(
    row: Mapping[str, Any],
    schema: pa.Schema | T.StructType,
    keys: Sequence[str],
    exclude: Sequence[str] = (),
    bits: int = 64,
    normalize: Normalizers = NO_RULES,
) -> tuple[int, ...]:
    """The fingerprint of one row: ``(fp,)`` for 64 bits, ``(fp, fp_hi)`` for 128.

    Equal to the values of the columns :func:`diffcdc.core.fingerprint.fingerprint_exprs`
    computes for the same row in Spark. ``row`` holds Python values as pyarrow's
    ``to_pylist()`` returns them (maps as lists of pairs or as dicts, structs as dicts).
    Compiling the schema costs more than one row: for many rows use :class:`RowFingerprinter`.
    """
    return RowFingerprinter(schema, keys, exclude, bits, normalize)(row)
