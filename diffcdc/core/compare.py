"""Compare a sink's replayed rows with a snapshot as multisets of rows (pure, no IO)."""

from __future__ import annotations

import decimal
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


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


def norm_value(value: Any) -> Any:
    """A comparable, hashable form of a value (NaN equals NaN; -0.0 equals 0.0; a map's
    entries in any order are the same map, as for the fingerprint)."""
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
    replayed: Replayed,
    snapshot_rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    ignore: Sequence[str] = (),
    sample: int = 5,
) -> VerifyResult:
    """Compare replayed rows with snapshot rows as multisets over ``columns``."""
    skip = {c.lower() for c in ignore}
    cols = [c for c in columns if c.lower() not in skip]
    if replayed.normalize is not None:
        snapshot_rows = (replayed.normalize(r) for r in snapshot_rows)
    expected = Counter(tuple(norm_value(r.get(c)) for c in cols) for r in snapshot_rows)
    actual = Counter(tuple(norm_value(r.get(c)) for c in cols) for r in replayed.rows)
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
