"""The sink contract with scoped snapshots (docs/scope.md): random sequences of snapshots that
each cover part of the table, the oracle of what every sink must then hold, and the checks.

The oracle knows nothing of the state: the image after a snapshot is the image before it with
every key the snapshot lacks deleted when its last row is inside the snapshot's scope and kept
(as it was) otherwise, and every row the snapshot holds put in. Each sink replayed from nothing
must give that image exactly, kept keys' values included; the history sink must give it as of
every version.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from hypothesis import strategies as st

from diffcdc.engine.verify import verify_sinks
from diffcdc.sinks.base import SinkTable
from diffcdc.sinks.registry import build_sink
from diffcdc.state.store import TableState
from tests.support.sink_kinds import SinkKind, postgres_history_once
from tests.support.snapshots import snapshot_sequences, snapshot_table
from tests.support.workspace import norm

#: The scope by region: the snapshots' nullable text column ``s2`` stands for a region.
REGION = {"columns": ["s2"]}
#: The rolling window: the rows of the last 30 years before the snapshot's time (the
#: snapshots' dates run from 1970 to 2100, so about a quarter are inside).
WINDOW = {"where": "day >= add_months(CAST({snapshot_time} AS DATE), -360)"}


@st.composite
def scoped_sequences(draw):
    """Snapshot sequences (:func:`snapshot_sequences`) of which every snapshot after the first
    holds only the rows of a random set of regions (``s2`` values) of the table as it is then
    (all of it when the set holds none of its rows)."""
    tables = draw(snapshot_sequences())
    out = [tables[0]]
    for table in tables[1:]:
        regions = sorted({r["s2"] for r in table.values()}, key=repr)
        chosen = draw(st.sets(st.sampled_from(regions)))
        out.append({k: r for k, r in table.items() if r["s2"] in chosen} or table)
    return out


@st.composite
def window_sequences(draw):
    """Snapshot sequences of which every snapshot after the first holds the rows of the table
    inside the window (:data:`WINDOW`) and, at random, some outside it; each (the first too)
    holds one row inside the window at least (a snapshot with none is refused)."""
    tables = draw(snapshot_sequences())
    out = []
    for n, table in enumerate(tables):
        keep = {k: r for k, r in table.items()
                if n == 0 or in_window(r, dt.date(2026, 1, 1)) or draw(st.booleans())}
        keep[(99, "w")] = {**next(iter(table.values())), "day": dt.date(2025, 1, 1)}
        out.append(keep)
    return out


def in_window(row: dict[str, Any], today: dt.date) -> bool:
    """:data:`WINDOW`'s predicate in Python (``add_months`` keeps the day, or the month's last)."""
    day = row["day"]
    if day is None:
        return False
    year = today.year - 30
    for last in (31, 30, 29, 28):
        try:
            start = dt.date(year, today.month, min(today.day, last))
            break
        except ValueError:
            continue
    return day >= start


def by_regions(snapshot: dict) -> Callable[[dict[str, Any]], bool]:
    held = {r["s2"] for r in snapshot.values()}
    return lambda row: row["s2"] in held


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {c: norm(v) for c, v in a.items()} == {c: norm(v) for c, v in b.items()}


def next_image(image: dict, snapshot: dict, in_scope: Callable[[dict[str, Any]], bool]
               ) -> tuple[dict, dict[str, int]]:
    """The oracle: the image after ``snapshot`` and the run's counts."""
    counts = dict.fromkeys(("inserted", "updated", "deleted", "kept"), 0)
    after = {}
    for key, row in snapshot.items():
        old = image.get(key)
        if old is None:
            counts["inserted"] += 1
        elif not same(old, row):
            counts["updated"] += 1
        after[key] = row
    for key, row in image.items():
        if key in snapshot:
            continue
        if in_scope(row):
            counts["deleted"] += 1
        else:
            counts["kept"] += 1
            after[key] = row
    return after, counts


@dataclass
class ScopedRun:
    """One table's scoped snapshots written and their oracle images kept (one Parquet file of
    the expected image per version, under ``root/expected``)."""

    root: str
    scope: dict[str, Any]
    image: dict | None = None
    images: dict[int, str] | None = None

    def write(self, sid: str, rows: dict, seed: int) -> None:
        os.makedirs(os.path.join(self.root, "source"), exist_ok=True)
        pq.write_table(snapshot_table(rows, seed), os.path.join(self.root, "source", sid))

    def expect(self, version: int, rows: dict, as_of: dt.datetime | None) -> dict[str, int]:
        """The oracle's image after ``rows`` (committed as ``version``), kept as a file."""
        previous = self.image or {}
        if "where" in self.scope:
            assert as_of is not None
            today = as_of.astimezone(dt.timezone.utc).date()
            counts: dict[str, int]
            self.image, counts = next_image(previous, rows, lambda r: in_window(r, today))
        else:
            self.image, counts = next_image(previous, rows, by_regions(rows))
        folder = os.path.join(self.root, "expected")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{version}.parquet")
        pq.write_table(snapshot_table(self.image, 0), path)
        self.images = {**(self.images or {}), version: path}
        return counts


def assert_image(spark, table, state: str, path: str) -> None:
    """Every sink of ``table`` replays to the image at ``path``, kept keys' values included."""
    tstate = TableState(state, table.state_name)
    head = tstate.head()
    ident = SinkTable(table.name, tuple(head.record.keys), table.schema_name,
                      tuple(table.exclude))
    sinks = {cfg.sink_id: build_sink(cfg, ident, tstate) for cfg in table.sinks}
    try:
        results = verify_sinks(spark, sinks, path)
    finally:
        for sink in sinks.values():
            sink.close()
    bad = {k: r.to_dict() for k, r in results.items() if not r.identical}
    assert not bad, bad


def assert_once_scoped(table, state: str, servers: dict[str, Any], kinds: list[SinkKind],
                       images: dict[int, str]) -> None:
    """Each sink's own "nothing twice" check; the history sink's "as of every version" against
    the oracle's image of the version (a scoped snapshot is not the table's image)."""
    tstate = TableState(state, table.name)
    for kind, sink in zip(kinds, table.sinks):
        if kind.name == "history":
            _history_as_of(tstate, sink.sink_id, images)
        elif kind.name == "postgres_history":
            postgres_history_once(tstate, sink.sink_id, servers, images=images)
        else:
            kind.assert_once(tstate, sink.sink_id, servers)


def _history_as_of(state: TableState, sink_id: str, images: dict[int, str]) -> None:
    from tests.support.history import as_of, canonical, check_history, history_rows

    commits = state.commits()
    target = commits[-1].record.sinks[sink_id].manifest["target"]
    rows = history_rows(target)
    check_history(rows, commits[-1].record.keys)
    for commit in commits:
        expected = pq.read_table(images[commit.version])
        then = as_of(rows, commit.version)
        assert canonical(then, expected.column_names) == canonical(expected.to_pylist()), (
            commit.version)
