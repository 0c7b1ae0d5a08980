"""Snapshots for the normalizer tests (issue 41.4): rows whose values are re-exported with
noise the table's rules remove (other padding, case, re-rounding, JSON key order) or really
change, and the counts the engine must report for them.

A row's value in each column is a *base* (what it means) and a *noise* number (how it is
spelled this time); :func:`spelled` gives the text, and every spelling of a base is equal to
it under :data:`RULES` (checked by :func:`check_spellings` against the reference normalizer).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from diffcdc.core.compare import norm_value
from diffcdc.core.normalize import Normalizers, compared_value, python_normalizer
from diffcdc.state.store import TableState
from tests.support.sink_kinds import KINDS, SinkKind

KEYS = ("k1", "k2")
#: The rules of the contract table, per column, and a weaker set the sequences may start with
#: (every value equal under it is equal under ``RULES``).
RULES = {"code": ["rtrim", "casefold"], "note": ["trim", "empty_as_null"],
         "amount": ["round:2"], "payload": ["json"]}
PARTIAL = {"code": ["rtrim"], "amount": ["round:2"]}
#: Rule sets in the order a sequence may move through them (never back).
RULE_SETS: tuple[dict[str, list[str]], ...] = ({}, PARTIAL, RULES)
SCHEMA = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("code", pa.string()),
                    ("note", pa.string()), ("amount", pa.float64()), ("payload", pa.string())])
TYPES = {"code": T.StringType(), "note": T.StringType(), "amount": T.DoubleType(),
         "payload": T.StringType()}

CODES = ("A001", "b-02", "Ünï", "x y")
NOTES = (None, "ok", "two words")
AMOUNTS = (0.0, 1.25, -7.5, 1234.57)
PAYLOADS = ('{"a":1,"b":[1,2]}', '{"a":2}', "[]", "not json")
BASES = {"code": CODES, "note": NOTES, "amount": AMOUNTS, "payload": PAYLOADS}
NOISE = 4  #: spellings per base


def spelled(column: str, base: Any, noise: int) -> Any:
    """Spelling ``noise`` (0: the base itself) of ``base`` in ``column``."""
    if noise == 0:
        return base
    if column == "code":
        return [base.upper() + " " * 6, base.lower(), base + "   "][noise % 3]
    if column == "note":
        if base is None:
            return ["", "   ", "\t"][noise % 3]
        return [f"  {base}", f"{base}\t\r\n", f" {base} "][noise % 3]
    if column == "amount":
        return base + [0.001, -0.004, 0.0049][noise % 3]
    if base == "not json":
        return base
    return {'{"a":1,"b":[1,2]}': [' { "b" : [1, 2], "a" : 1 } ', '{"b":[1,2],"a":1}',
                                  '{"a": 1, "b": [1,2]}'],
            '{"a":2}': ['{ "a": 2 }', ' {"a":2}', '{"a" :2}'],
            "[]": ["[ ]", " [] ", "[\n]"]}[base][noise % 3]


def snapshot_rows(picks: Mapping[tuple[int, str], Sequence[tuple[int, int]]]) -> list[dict]:
    """Rows from ``{key: [(base index, noise) per column of BASES]}``."""
    return [{"k1": k1, "k2": k2, **{c: spelled(c, BASES[c][b % len(BASES[c])], n)
                                    for c, (b, n) in zip(BASES, pick)}}
            for (k1, k2), pick in sorted(picks.items())]


def write_snapshot(root: str, sid: str, rows: list[dict]) -> str:
    path = os.path.join(root, "source", sid)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, SCHEMA), path)
    return path


def normalized(rows: list[dict], rules: Mapping[str, list[str]]) -> dict[tuple, tuple]:
    """``{key: values}`` with ``rules`` applied (the reference normalizer), as compared."""
    normalize = Normalizers.parse(rules)
    fns = {c: python_normalizer(normalize.get(c), TYPES[c]) for c in TYPES}
    out = {}
    for r in rows:
        values = [r[c] if fns[c] is None or r[c] is None else fns[c](r[c]) for c in TYPES]
        out[tuple(r[k] for k in KEYS)] = tuple(norm_value(v) for v in values)
    return out


def expected_counts(before: list[dict], after: list[dict], rules: Mapping[str, list[str]]
                    ) -> dict[str, int]:
    """Inserted, updated, deleted from ``before`` to ``after`` compared under ``rules``."""
    old, new = normalized(before, rules), normalized(after, rules)
    return {"inserted": sum(k not in old for k in new), "deleted": sum(k not in new for k in old),
            "updated": sum(k in old and old[k] != new[k] for k in new)}


def check_spellings() -> None:
    """Every spelling equals its base under RULES, and PARTIAL's spellings under PARTIAL."""
    for column, bases in BASES.items():
        for base in bases:
            for noise in range(NOISE):
                row = {"k1": 0, "k2": "a", **{c: BASES[c][0] for c in BASES}}
                noisy = {**row, column: spelled(column, base, noise)}
                clean = {**row, column: base}
                assert normalized([noisy], RULES) == normalized([clean], RULES), (column, noise)


def history_once_normalized(rules: Mapping[str, list[str]]) -> Any:
    """The history sink's own check with the snapshot compared through ``rules``: a row the
    fingerprint took for unchanged keeps the spelling the history published before."""
    from deltalake import DeltaTable

    from tests.support.history import as_of, canonical, check_history, history_rows

    normalize = Normalizers.parse(rules)
    through = {c.column: compared_value(c, TYPES[c.column]) for c in normalize.columns}

    def clean(rows: list[dict]) -> list[dict]:
        return [{c: through[c](v) if c in through else v for c, v in r.items()} for r in rows]

    def check(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
        commits = state.commits()
        manifest = commits[-1].record.sinks[sink_id].manifest
        tagged = [h.get("diffcdc.version") for h in DeltaTable(manifest["target"]).history()
                  if "diffcdc.version" in h]
        with_rows = [str(c.version) for c in commits if c.record.sinks[sink_id].manifest.get("rows")]
        assert sorted(tagged, key=int) == with_rows, (tagged, with_rows)
        rows = history_rows(manifest["target"])
        check_history(rows, list(KEYS))
        for commit in commits:  # rules only ever coarsen: the head's hold for every version
            data = pq.read_table(commit.record.snapshot_path).to_pylist()
            then = as_of(rows, commit.version)
            assert canonical(clean(then), SCHEMA.names) == canonical(clean(data), SCHEMA.names), (
                commit.version)

    return check


def normalized_kinds(rules: Mapping[str, list[str]]) -> list[SinkKind]:
    """Every sink kind; the history's check compares through ``rules`` (the others' checks
    do not compare with snapshots)."""
    from dataclasses import replace

    from tests.support.sink_kinds import postgres_history_once

    normalize = Normalizers.parse(rules)
    through = {c.column: compared_value(c, TYPES[c.column]) for c in normalize.columns}

    def pg_history(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
        postgres_history_once(state, sink_id, servers, through)

    return [replace(k, assert_once=history_once_normalized(rules)) if k.name == "history"
            else replace(k, assert_once=pg_history) if k.name == "postgres_history" else k
            for k in KINDS]
