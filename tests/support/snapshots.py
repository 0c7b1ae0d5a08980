"""Snapshots over one wide schema (a composite key, NULLs everywhere else, awkward types):
random sequences of them for the replay property, two fixed ones with every kind of change,
and writing one as a Parquet file with its columns in a different order each time.

Random sequences: NULL swaps, key changes, deletes and re-inserts of the same key; decimal,
-0.0/NaN/inf doubles, binary, dates, UTC timestamps, nested struct/array/map.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from tests.support.workspace import UTC

SCHEMA = pa.schema([
    ("k1", pa.int64()),
    ("k2", pa.string()),
    ("s1", pa.string()),
    ("s2", pa.string()),
    ("n", pa.int32()),
    ("d", pa.float64()),
    ("dec", pa.decimal128(10, 3)),
    ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("flag", pa.bool_()),
    ("blob", pa.binary()),
    ("arr", pa.list_(pa.int32())),
    ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ("m", pa.map_(pa.string(), pa.int32())),
])

#: Any text but lone surrogates and the NUL character: PostgreSQL's text and jsonb cannot hold
#: NUL, so the postgres kinds refuse it (tests/test_postgres_sink.py); every other control
#: character stays in.
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                      blacklist_characters="\x00"), max_size=4)
small_int = st.integers(-3, 3)


def maybe(s):
    return st.none() | s


ROW = st.fixed_dictionaries({
    "s1": maybe(st.sampled_from(["", "a", "NULL", "ü"]) | text),
    "s2": maybe(st.sampled_from(["", "a"]) | text),
    "n": maybe(small_int),
    "d": maybe(st.sampled_from([0.0, -0.0, float("nan"), float("inf"), 1.5])),
    "dec": maybe(st.sampled_from([Decimal("1.500"), Decimal("-0.001"), Decimal("0.000")])),
    "day": maybe(st.dates(dt.date(1970, 1, 1), dt.date(2100, 1, 1))),
    "ts": maybe(st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2100, 1, 1)).map(lambda t: t.replace(tzinfo=UTC))),
    "flag": maybe(st.booleans()),
    "blob": maybe(st.binary(max_size=3)),
    "arr": maybe(st.lists(maybe(small_int), max_size=3)),
    "st": maybe(st.fixed_dictionaries({"a": maybe(small_int), "b": maybe(st.sampled_from(["", "x"]))})),
    "m": maybe(st.dictionaries(st.sampled_from(["a", "b", "c"]), maybe(small_int), max_size=3).map(lambda d: list(d.items()))),
})
KEY = st.tuples(st.integers(0, 12), st.sampled_from(["a", "b", "", "é"]))


@st.composite
def snapshot_sequences(draw):
    first = draw(st.dictionaries(KEY, ROW, min_size=1, max_size=10))
    snapshots = [first]
    for _ in range(draw(st.integers(1, 3))):
        previous = snapshots[-1]
        current = {}
        for key, row in previous.items():
            action = draw(st.sampled_from(["keep", "keep", "update", "swap", "delete", "rekey"]))
            if action == "keep":
                current[key] = row
            elif action == "update":
                current[key] = draw(ROW)
            elif action == "swap":  # NULL swap between two string columns
                current[key] = {**row, "s1": row["s2"], "s2": row["s1"]}
            elif action == "rekey":
                new_key = draw(KEY)
                if new_key not in previous:
                    current[new_key] = row
        for key, row in draw(st.dictionaries(KEY, ROW, max_size=4)).items():
            current.setdefault(key, row)  # new keys, and re-inserts of deleted ones
        if not current:
            current = {draw(KEY): draw(ROW)}
        snapshots.append(current)
    return snapshots


def snapshot_table(rows: dict, seed: int) -> pa.Table:
    """A snapshot (``{(k1, k2): row}``) as a table of :data:`SCHEMA`, its columns shuffled by
    ``seed``."""
    records = [{"k1": k[0], "k2": k[1], **row} for k, row in sorted(rows.items())]
    table = pa.Table.from_pylist(records, schema=SCHEMA)
    names = list(SCHEMA.names)
    random.Random(seed).shuffle(names)  # a different column order in every file
    return table.select(names)


def row(i: int, text: str) -> dict[str, Any]:
    """A row with every kind of column filled (NULLs in a few places)."""
    return {"s1": text, "s2": None if i % 3 == 0 else f"x{i}", "n": i, "d": i / 4,
            "dec": Decimal(i) / 8, "day": dt.date(2026, 1, 1 + i % 28),
            "ts": dt.datetime(2026, 1, 1, i % 24, tzinfo=UTC), "flag": i % 2 == 0,
            "blob": bytes([i % 256]), "arr": [i, None], "st": {"a": i, "b": None},
            "m": [("k", i)]}


def snapshot_one(n: int = 20) -> dict:
    """``n`` rows with keys (i, "a")."""
    return {(i, "a"): row(i, f"v{i}") for i in range(n)}


def snapshot_two(n: int = 20) -> dict:
    """Updates, an unchanged part, a delete, an insert and a key change (6 → 60)."""
    rows = snapshot_one(n)
    for i in range(3):
        rows[(i, "a")] = row(i, f"changed{i}")
    del rows[(5, "a")]
    rows[(6, "a")]["s1"] = "moved"
    rows[(60, "a")] = rows.pop((6, "a"))
    rows[(99, "b")] = row(99, "new")
    return rows


def write_snapshot(source: str, name: str, rows: dict, seed: int) -> None:
    """Write ``rows`` as the Parquet snapshot ``source/name`` (columns shuffled by ``seed``)."""
    os.makedirs(source, exist_ok=True)
    pq.write_table(snapshot_table(rows, seed), os.path.join(source, name))
