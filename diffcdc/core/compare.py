"""Compare a sink's replayed rows with a snapshot as multisets of rows (pure, no IO)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Replayed:
    """A sink's published output applied from nothing: the rows it holds now."""

    keys: list[str]
    columns: list[str]
    rows: list[dict[str, Any]]
    #: Units replayed (files, Delta versions, Kafka messages), for messages.
    units: int = 0
    #: How a snapshot row must be converted to compare with these rows (e.g. text types).
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None = None


#: Enough digits to normalize any decimal(38, s) exactly (the default context rounds at 28:
#: 10^37 + 1 and 10^37 + 2 would compare equal).
_EXACT = decimal.Context(prec=80)


@dataclass(frozen=True, order=True)
class Day:
    """A date as days since 1970-01-01: every date Spark or Arrow holds, also the years before
    1 and after 9999 that Python's ``datetime.date`` cannot."""

    days: int


@dataclass(frozen=True, order=True)
class Instant:
    """A timestamp as nanoseconds since 1970-01-01 (UTC when ``aware``, else wall-clock time):
    every timestamp Spark or Arrow holds, also those Python's ``datetime`` cannot."""

    nanos: int
    aware: bool


_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DAY = dt.date(1970, 1, 1)
_TO_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()``; a date or timestamp column holding a value Python's datetime
    cannot (year 0, 10000 and beyond) is read as exact integers instead (:class:`Day`,
    :class:`Instant`), which :func:`norm_value` also makes of the values Python holds."""
    try:
        return table.to_pylist()
    except (OverflowError, ValueError):
        pass
    columns = [column_values(column) for column in table.columns]
    return [dict(zip(table.column_names, values)) for values in zip(*columns)]


def column_values(column: Any) -> list[Any]:
    """An Arrow column's values as :func:`arrow_rows` reads them."""
    import pyarrow as pa

    try:
        return column.to_pylist()
    except (OverflowError, ValueError):
        kind = column.type
        if pa.types.is_date32(kind):
            return [None if v is None else Day(v) for v in column.cast(pa.int32()).to_pylist()]
        if pa.types.is_date64(kind):
            return [None if v is None else Day(v // 86_400_000)
                    for v in column.cast(pa.int64()).to_pylist()]
        if pa.types.is_timestamp(kind):
            scale, aware = _TO_NANOS[kind.unit], kind.tz is not None
            return [None if v is None else Instant(v * scale, aware)
                    for v in column.cast(pa.int64()).to_pylist()]
        raise


def norm_value(value: Any) -> Any:
    """A comparable, hashable form of a value (NaN equals NaN; -0.0 equals 0.0; a map's
    entries in any order are the same map, as for the fingerprint; dates and timestamps as
    exact integers, so a value Python cannot hold compares too)."""
    if isinstance(value, dt.datetime):
        aware = value.tzinfo is not None and value.utcoffset() is not None
        delta = value - (_EPOCH_UTC if aware else _EPOCH.replace(tzinfo=value.tzinfo))
        return Instant(delta // dt.timedelta(microseconds=1) * 1000, aware)
    if isinstance(value, dt.date):
        return Day((value - _EPOCH_DAY).days)
    if isinstance(value, float):
        if math.isnan(value):
            return ("NaN",)
        return 0.0 if value == 0 else value
    if isinstance(value, decimal.Decimal):
        return value.normalize(_EXACT) if not value.is_nan() else ("NaN",)
    if isinstance(value, list):
        items = tuple(norm_value(v) for v in value)
        if value and all(isinstance(v, tuple) for v in value):  # a map: Arrow's (key, value) pairs
            return tuple(sorted(items, key=repr))
        return items
    if isinstance(value, tuple):
        return tuple(norm_value(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, norm_value(v)) for k, v in value.items()))
    return value


@dataclass
class VerifyResult:
    """The outcome of comparing a replayed sink with a snapshot."""

    identical: bool
    mirror_rows: int
    snapshot_rows: int
    files: int  #: units replayed (landing files, Delta versions, Kafka messages)
    columns: list[str]
    missing: list[Any]  # keys of snapshot rows the sink lacks (or has different)
    unexpected: list[Any]  # keys of sink rows not in the snapshot (or different)
    #: Sink rows of keys a scoped table keeps outside its snapshot's scope, set apart.
    kept: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "mirror_rows": self.mirror_rows,
            "snapshot_rows": self.snapshot_rows,
            "files": self.files,
            "columns": self.columns,
            "missing_sample": [repr(k) for k in self.missing],
            "unexpected_sample": [repr(k) for k in self.unexpected],
            **({"kept": self.kept} if self.kept else {}),
        }


def set_apart_kept(
    replayed: Replayed, kept: Sequence[dict[str, Any]]
) -> tuple[Replayed, list[Any]]:
    """``replayed`` without the rows of the ``kept`` keys (a scoped table's keys outside its
    snapshot's scope, as the state has them), and those of the kept keys it lacks."""
    keys = replayed.keys

    def key_of(row: dict[str, Any]) -> tuple[Any, ...]:
        got = {k.lower(): v for k, v in row.items()}
        return tuple(norm_value(got.get(k.lower())) for k in keys)

    normalize = replayed.normalize or (lambda r: r)
    wanted = {key_of(normalize(dict(k))): k for k in kept}
    rows, found = [], set()
    for row in replayed.rows:
        key = key_of(row)
        if key in wanted:
            found.add(key)
        else:
            rows.append(row)
    absent = [tuple(v.values())[0] if len(v) == 1 else tuple(v.values())
              for k, v in wanted.items() if k not in found]
    return Replayed(keys, replayed.columns, rows, replayed.units, replayed.normalize), absent


def compare(
    replayed: Replayed,
    snapshot_rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    ignore: Sequence[str] = (),
    sample: int = 5,
    values: Mapping[str, Callable[[Any], Any]] | None = None,
) -> VerifyResult:
    """Compare replayed rows with snapshot rows as multisets over ``columns``; ``values``:
    per column, a function both sides' values are compared through (the table's normalizers,
    :func:`diffcdc.core.normalize.compared_value`)."""
    skip = {c.lower() for c in ignore}
    cols = [c for c in columns if c.lower() not in skip]
    if replayed.normalize is not None:
        snapshot_rows = (replayed.normalize(r) for r in snapshot_rows)
    through = [(values or {}).get(c) for c in cols]

    def row_of(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(norm_value(r.get(c) if f is None else f(r.get(c)))
                     for c, f in zip(cols, through))

    expected = Counter(map(row_of, snapshot_rows))
    actual = Counter(map(row_of, replayed.rows))
    key_idx = [cols.index(k) for k in replayed.keys if k in cols]
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
        files=replayed.units,
        columns=cols,
        missing=keys_of(only_expected),
        unexpected=keys_of(only_actual),
    )
