"""What a history table (the Delta sink's ``mode = "scd2"``) must be, checked from its rows.

Independent of diffcdc's own code for it: the rows are read with delta-rs and every rule of
docs/delta.md is checked by hand — "as of V" is snapshot V, at most one open row per key, a
key's rows never overlap, validity times follow the versions, and the changed columns of each
row that continues its key's previous row are exactly the columns whose values differ.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from diffcdc.core.compare import norm_value

HISTORY = ("__START_AT", "__END_AT", "__VALID_FROM", "__VALID_TO", "__CHANGED_COLUMNS")


def history_rows(path: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    from diffcdc.sinks.delta.feed import plain_types

    return plain_types(DeltaTable(path).to_pyarrow_table()).to_pylist()


def as_of(rows: list[dict[str, Any]], version: int) -> list[dict[str, Any]]:
    """The table as of ``version``: its rows open then, without the history columns."""
    return [{c: v for c, v in r.items() if c not in HISTORY} for r in rows
            if r["__START_AT"] <= version and (r["__END_AT"] is None or r["__END_AT"] > version)]


def canonical(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> list[Any]:
    """Rows as a sorted list of normalized tuples (only ``columns`` when given)."""
    return sorted((tuple((c, norm_value(r.get(c))) for c in sorted(columns or r)) for r in rows),
                  key=repr)


def check_history(rows: list[dict[str, Any]], keys: Sequence[str], *,
                  compared: Sequence[str] | None = None) -> None:
    """Every rule but "as of" (see the module): raises AssertionError naming the broken one.
    ``compared``: the columns whose changes are listed (default: every non-key column)."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[tuple(norm_value(r[k]) for k in keys)].append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r["__START_AT"])
        assert sum(r["__END_AT"] is None for r in versions) <= 1, ("two open rows", key)
        for r in versions:
            assert r["__END_AT"] is None or r["__START_AT"] < r["__END_AT"], ("empty row", key, r)
            assert (r["__END_AT"] is None) == (r["__VALID_TO"] is None), ("validity", key, r)
            if r["__VALID_TO"] is not None:
                assert r["__VALID_FROM"] <= r["__VALID_TO"], ("validity backwards", key, r)
        for before, after in zip(versions, versions[1:]):
            assert before["__END_AT"] is not None and before["__END_AT"] <= after["__START_AT"], (
                "overlapping rows", key, before, after)
            if before["__END_AT"] == after["__START_AT"]:  # the next row continues this one
                assert before["__VALID_TO"] == after["__VALID_FROM"], ("validity gap", key)
                names = compared if compared is not None else [
                    c for c in after if c not in HISTORY and c not in keys]
                differ = sorted(c for c in names
                                if norm_value(before.get(c)) != norm_value(after.get(c)))
                assert after["__CHANGED_COLUMNS"] == differ, ("changed columns", key, before,
                                                              after, differ)
            else:  # back after a delete: a new start
                assert after["__CHANGED_COLUMNS"] is None, ("changed columns of a re-insert", key)
        assert versions[0]["__CHANGED_COLUMNS"] is None, ("changed columns of an insert", key)
