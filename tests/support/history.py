"""What a history table (the Delta sink's ``mode = "scd2"``) must be, checked from its rows.

Independent of diffcdc's own code for it: the rows are read with delta-rs and every rule of
docs/delta.md and docs/history.md is checked by hand — "as of V" is snapshot V (tombstones
left out), at most one open row per key, a key's rows never overlap, validity times follow the
versions, the changed columns of each row that continues its key's previous row are exactly
the columns whose values differ, and with deletes as rows: a key's rows leave no gap (a delete
opens a tombstone with the key's last values, a key back after it closes it), the open end is
the configured sentinel. Only the config's values (names, sentinels) come from the user's side,
as :class:`Names`; nothing of diffcdc's layout code is used.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from diffcdc.core.compare import norm_value


@dataclass(frozen=True)
class Names:
    """A history's column names and open-end sentinels, as the sink's config gives them."""

    start_at: str = "__START_AT"
    end_at: str = "__END_AT"
    valid_from: str = "__VALID_FROM"
    valid_to: str = "__VALID_TO"
    changed: str = "__CHANGED_COLUMNS"
    #: The tombstone flag (None: deletes close rows only).
    deleted: str | None = None
    open_end_at: int | None = None
    open_valid_to: dt.datetime | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        names = (self.start_at, self.end_at, self.valid_from, self.valid_to, self.changed)
        return (*names, self.deleted) if self.deleted else names

    def is_open(self, row: dict[str, Any]) -> bool:
        return row[self.end_at] == self.open_end_at if self.open_end_at is not None else (
            row[self.end_at] is None)


DEFAULT = Names()
HISTORY = DEFAULT.columns


def history_rows(path: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    from diffcdc.sinks.delta.feed import plain_types

    return plain_types(DeltaTable(path).to_pyarrow_table()).to_pylist()


def as_of(rows: list[dict[str, Any]], version: int, names: Names = DEFAULT
          ) -> list[dict[str, Any]]:
    """The table as of ``version``: its rows open then and no tombstone, without the history
    columns."""
    s, e = names.start_at, names.end_at
    return [{c: v for c, v in r.items() if c not in names.columns} for r in rows
            if r[s] <= version and (r[e] is None or r[e] > version)
            and not (names.deleted and r[names.deleted])]


def canonical(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> list[Any]:
    """Rows as a sorted list of normalized tuples (only ``columns`` when given)."""
    return sorted((tuple((c, norm_value(r.get(c))) for c in sorted(columns or r)) for r in rows),
                  key=repr)


def check_history(rows: list[dict[str, Any]], keys: Sequence[str], *,
                  compared: Sequence[str] | None = None, names: Names = DEFAULT) -> None:
    """Every rule but "as of" (see the module): raises AssertionError naming the broken one.
    ``compared``: the columns whose changes are listed (default: every non-key column)."""
    n = names
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[tuple(norm_value(r[k]) for k in keys)].append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r[n.start_at])
        assert sum(n.is_open(r) for r in versions) <= 1, ("two open rows", key)
        for r in versions:
            if n.open_end_at is not None:  # no NULL end, and the sentinel only on the open row
                assert r[n.end_at] is not None, ("NULL end beside a sentinel", key, r)
            if n.open_valid_to is not None:
                assert r[n.valid_to] is not None, ("NULL valid-to beside a sentinel", key, r)
                assert (r[n.valid_to] == n.open_valid_to) == n.is_open(r), (
                    "valid-to sentinel on a closed row, or none on the open one", key, r)
            else:
                assert (r[n.valid_to] is None) == n.is_open(r), ("validity", key, r)
            assert n.is_open(r) or r[n.start_at] < r[n.end_at], ("empty row", key, r)
            if not n.is_open(r):
                assert r[n.valid_from] <= r[n.valid_to], ("validity backwards", key, r)
            if n.deleted:
                assert r[n.deleted] is not None, ("NULL deleted flag", key, r)
        for before, after in zip(versions, versions[1:]):
            assert not n.is_open(before) and before[n.end_at] <= after[n.start_at], (
                "overlapping rows", key, before, after)
            tomb = bool(n.deleted) and before[n.deleted]
            if n.deleted:  # deletes are rows: a key's rows leave no gap
                assert before[n.end_at] == after[n.start_at], ("gap beside tombstones", key)
                assert not (tomb and after[n.deleted]), ("two tombstones in a row", key)
            if before[n.end_at] == after[n.start_at]:  # the next row continues this one
                assert before[n.valid_to] == after[n.valid_from], ("validity gap", key)
            data = [c for c in after if c not in n.columns and c not in keys]
            if n.deleted and after[n.deleted]:  # a tombstone: the key's last values, as they were
                assert after[n.changed] is None, ("changed columns of a tombstone", key)
                assert all(norm_value(before.get(c)) == norm_value(after.get(c)) for c in data), (
                    "a tombstone's values are not the key's last ones", key, before, after)
            elif before[n.end_at] == after[n.start_at] and not tomb:  # an update
                names_ = compared if compared is not None else data
                differ = sorted(c for c in names_
                                if norm_value(before.get(c)) != norm_value(after.get(c)))
                assert after[n.changed] == differ, ("changed columns", key, before, after,
                                                    differ)
            else:  # back after a delete: a new start
                assert after[n.changed] is None, ("changed columns of a re-insert", key)
        assert versions[0][n.changed] is None, ("changed columns of an insert", key)
        if n.deleted:
            assert not versions[0][n.deleted], ("a key's first row is a tombstone", key)


def published_outputs(base: Any) -> tuple[Any, ...]:
    """What runs under ``base`` (a table ``T``: ``state``, the history ``lake/h``, the
    ``landing`` folder) published: the state's head version and published sinks, the
    history's Delta version, the landing files."""
    from deltalake import DeltaTable

    from diffcdc.state.store import TableState

    head = TableState(str(base / "state"), "T").head()
    lake = str(base / "lake" / "h")
    files = sorted(os.path.relpath(os.path.join(d, f), base / "landing")
                   for d, _, names in os.walk(base / "landing") for f in names)
    return (head.version if head else None, head.published if head else None,
            DeltaTable(lake).version() if os.path.isdir(lake) else None, files)
