"""Which columns of a row changed, and which rows of two tables share a key: Arrow logic, no IO.

A column changed when its two values differ the way the fingerprint
(:mod:`diffcdc.core.fingerprint`) tells values apart: NULL equals only NULL (and ``''`` is not
NULL), ``-0.0`` equals ``0.0``, every NaN equals every NaN, a struct's fields count by name, an
array's positions and NULL elements count, a map's entry order does not. A column one side
does not have counts as NULL there (a column added with values changed; one added all-NULL did
not).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from diffcdc.core.compare import column_values, norm_value

#: The column that lists an update's changed columns (history rows, Delta changelog rows).
CHANGED_COLUMNS = "__CHANGED_COLUMNS"


def changed_columns(old: pa.Table, new: pa.Table, columns: Iterable[str]) -> list[list[str]]:
    """Per row ``i``: the names in ``columns`` (sorted) whose value in ``old`` row ``i``
    differs from ``new`` row ``i``. Both tables have the same number of rows."""
    if old.num_rows != new.num_rows:
        raise ValueError(f"{old.num_rows} old rows against {new.num_rows} new rows")
    out: list[list[str]] = [[] for _ in range(new.num_rows)]
    for name in sorted(set(columns)):
        differs = column_differs(_column(old, name), _column(new, name), new.num_rows)
        for i in pc.indices_nonzero(differs).to_pylist():
            out[i].append(name)
    return out


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    return table.column(name).combine_chunks()


def column_differs(old: pa.Array | None, new: pa.Array | None, rows: int) -> pa.BooleanArray:
    """Row by row: do the two values differ (see the module's rules)? None: an absent column."""
    if old is None and new is None:
        return pa.array([False] * rows, pa.bool_())
    if old is None or new is None:
        present = new if old is None else old
        assert present is not None
        return pc.is_valid(present)
    if old.type != new.type:
        try:
            old = old.cast(new.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _differs_by_value(old, new)
    if _nested(new.type):
        return _differs_by_value(old, new)
    same = pc.fill_null(pc.equal(old, new), False)
    same = pc.or_(same, pc.and_(pc.is_null(old), pc.is_null(new)))
    if pa.types.is_floating(new.type):
        both_nan = pc.and_(pc.fill_null(pc.is_nan(old), False), pc.fill_null(pc.is_nan(new), False))
        same = pc.or_(same, both_nan)
    return pc.invert(same)


def _nested(dtype: pa.DataType) -> bool:
    return pa.types.is_nested(dtype) or pa.types.is_dictionary(dtype)


def _differs_by_value(old: pa.Array, new: pa.Array) -> pa.BooleanArray:
    return pa.array([norm_value(a) != norm_value(b) for a, b in zip(old.to_pylist(), new.to_pylist())],
                    pa.bool_())


def key_rows(table: pa.Table, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's key values, as a hashable tuple (canonical: NaN matches NaN)."""
    columns = [column_values(table.column(k)) for k in keys]  # also dates Python cannot hold
    return [tuple(norm_value(v) for v in row) for row in zip(*columns)]


def partners(left: pa.Table, right: pa.Table, keys: Sequence[str]) -> list[int | None]:
    """For each row of ``left``, the row of ``right`` with the same key (None: none); keys
    are unique in ``right``."""
    where = {key: i for i, key in enumerate(key_rows(right, keys))}
    return [where.get(key) for key in key_rows(left, keys)]
