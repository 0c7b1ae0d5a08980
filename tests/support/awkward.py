"""Generated names, types and schema sequences for the names/types contract
(tests/test_edges_names_property.py).

Names draw from dots, spaces, quotes, brackets, slashes, unicode, SQL keywords, leading digits
and case variants; types from all-NULL columns, decimals at 38 digits, timestamps at years 1
and 9999, nested structs with such field names, maps and lists (and a Parquet TIME, which is
refused up front). Values are a function of (key, column, seed): two snapshots drawn with
different seeds change some rows and keep others.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

NAMES = (
    "order.id", "the value", "it's", 'q"uote', "a`b`", "[br]", "a/b", "back\\slash", "é日本",
    "ß", "select", "FROM", "group", "1st", "2", "Id", "MiXeD", "k.1 `x`", "x" * 60, "a.b.c",
    "naïve", "tab\tname", "{curly}", "%pct", "$dollar", "-dash", "#hash", "emoji😀",
)
#: Names of nested struct fields (the same kinds of trouble).
FIELD_NAMES = ("a.b", "C c", "it's", "select", "1x", "é", "`q`", "[x]")
UTC = dt.timezone.utc


def case_variant(name: str, how: int) -> str:
    """``name`` in another case (0: as is, 1: upper, 2: lower, 3: swapped)."""
    return (name, name.upper(), name.lower(), name.swapcase())[how]


def _pick(options: list[Any], *parts: Any) -> Any:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return options[int.from_bytes(digest[:4], "big") % len(options)]


@dataclass(frozen=True)
class Kind:
    """One column type: its Arrow type and the values it takes (None among them)."""

    name: str
    arrow: pa.DataType
    values: tuple[Any, ...]
    key: bool = False  #: usable as a key column
    #: Refused up front (the message names the column and says to cast it).
    refused: bool = False


def _struct_type(names: tuple[str, str]) -> pa.DataType:
    return pa.struct([(names[0], pa.int32()), (names[1], pa.struct([("in.ner", pa.string())]))])


KINDS = {
    "long": Kind("long", pa.int64(), (None, 0, -1, 2**63 - 1, -(2**63)), key=True),
    "text": Kind("text", pa.string(), (None, "", "a", "NULL", "é'`\"", "x" * 300), key=True),
    "dec38": Kind("dec38", pa.decimal128(38, 10), (
        None, Decimal("9" * 28 + "." + "9" * 10), Decimal("-" + "9" * 28 + "." + "9" * 10),
        Decimal("0E-10"), Decimal("1.0000000001")), key=True),
    "ts": Kind("ts", pa.timestamp("us", tz="UTC"), (
        None, dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999,
                                                            tzinfo=UTC),
        dt.datetime(1970, 1, 1, tzinfo=UTC))),
    "day": Kind("day", pa.date32(), (None, dt.date(1, 1, 1), dt.date(9999, 12, 31),
                                     dt.date(1582, 10, 4)), key=True),
    "double": Kind("double", pa.float64(), (None, -0.0, 0.0, float("nan"), float("inf"),
                                            -float("inf"), 1e308)),
    "nulls": Kind("nulls", pa.string(), (None,)),  # a typed column that is all NULL
    "void": Kind("void", pa.null(), (None,)),  # an untyped all-NULL column
    "map": Kind("map", pa.map_(pa.string(), pa.int64()), (
        None, [], [("b", 1), ("a", None)], [("a.b", 2)])),
    "list": Kind("list", pa.list_(pa.string()), (None, [], [None, "a"], ["é", ""])),
    "time": Kind("time", pa.time64("us"), (None, dt.time(0, 0), dt.time(23, 59, 59, 999999)),
                 refused=True),
}
VALUE_KINDS = tuple(k for k in KINDS if k != "time")
KEY_KINDS = tuple(k for k, v in KINDS.items() if v.key)


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    fields: tuple[str, str] = ("a.b", "C c")  #: a struct's field names (kind ``struct``)

    def arrow(self) -> pa.DataType:
        if self.kind == "struct":
            return _struct_type(self.fields)
        return KINDS[self.kind].arrow

    def value(self, key: Any, seed: int) -> Any:
        if self.kind == "struct":
            inner = _pick([None, {"in.ner": None}, {"in.ner": "v"}], key, self.name, seed, 1)
            return _pick([None, {self.fields[0]: None, self.fields[1]: inner},
                          {self.fields[0]: 7, self.fields[1]: None}], key, self.name, seed)
        return _pick(list(KINDS[self.kind].values), key, self.name, seed)


@dataclass
class Schema:
    """Key columns first, then the other columns."""

    keys: list[Column]
    columns: list[Column] = field(default_factory=list)

    def all(self) -> list[Column]:
        return [*self.keys, *self.columns]

    def table(self, rows: list[int], seed: int, changed: set[int]) -> pa.Table:
        """Rows of key numbers ``rows``; the rows in ``changed`` take their values of
        ``seed``, the others those of seed 0."""
        schema = pa.schema([(c.name, c.arrow()) for c in self.all()])
        data = []
        for r in rows:
            row = {}
            for c in self.keys:
                row[c.name] = key_value(c.kind, r)
            for c in self.columns:
                row[c.name] = c.value(r, seed if r in changed else 0)
            data.append(row)
        return pa.Table.from_pylist(data, schema)

    def has_refused_type(self) -> bool:
        return any(c.kind in KINDS and KINDS[c.kind].refused for c in self.all())


def key_value(kind: str, r: int) -> Any:
    """The ``r``-th distinct non-NULL key value of ``kind``."""
    if kind == "long":
        return r * 7 - 3
    if kind == "text":
        return f"k'{r}.`é"
    if kind == "dec38":
        return Decimal(f"{r}.{r:010d}") + Decimal("9" * 27)
    if kind == "day":
        return dt.date(1, 1, 1) + dt.timedelta(days=r * 400)
    raise ValueError(kind)


@st.composite
def distinct_names(draw, n: int) -> list[str]:
    """``n`` names, distinct case-blind, each in a drawn case variant."""
    picked = draw(st.lists(st.sampled_from(NAMES), min_size=n, max_size=n,
                           unique_by=lambda x: x.lower()))
    return [case_variant(name, draw(st.integers(0, 3))) for name in picked]


@st.composite
def awkward_schemas(draw, *, with_refused: bool = True) -> Schema:
    """1-2 keys and 2-5 other columns of awkward names and types."""
    n_keys = draw(st.integers(1, 2))
    n_cols = draw(st.integers(2, 5))
    names = draw(distinct_names(n_keys + n_cols))
    kinds = (*VALUE_KINDS, "struct", *(("time",) if with_refused else ()))
    keys = [Column(names[i], draw(st.sampled_from(KEY_KINDS))) for i in range(n_keys)]
    columns = []
    for name in names[n_keys:]:
        kind = draw(st.sampled_from(kinds))
        fields = tuple(draw(st.lists(st.sampled_from(FIELD_NAMES), min_size=2, max_size=2,
                                     unique_by=lambda x: x.lower())))
        columns.append(Column(name, kind, fields))  # type: ignore[arg-type]
    return Schema(keys, columns)


#: Schema changes a sequence draws from.
OPS = ("add", "remove", "retype", "rename", "recase")


@dataclass(frozen=True)
class Change:
    """One schema change: ``op`` on the column at ``index`` (of the non-key columns; for
    ``recase`` of all columns, keys first), with a new name or kind where it needs one."""

    op: str
    index: int
    name: str = ""
    kind: str = ""

    def apply(self, schema: Schema) -> Schema | None:
        """The schema after the change, or None when it does not apply."""
        keys, columns = list(schema.keys), list(schema.columns)
        taken = {c.name.lower() for c in schema.all()}
        if self.op == "add":
            if self.name.lower() in taken:
                return None
            return Schema(keys, [*columns, Column(self.name, self.kind)])
        if self.op == "recase":
            everything = [*keys, *columns]
            if not everything:
                return None
            i = self.index % len(everything)
            old = everything[i]
            new_name = next((v for v in (old.name.swapcase(), old.name.upper(),
                                         old.name.lower()) if v != old.name), None)
            if new_name is None:  # no letters: no other case
                return None
            everything[i] = Column(new_name, old.kind, old.fields)
            return Schema(everything[:len(keys)], everything[len(keys):])
        if not columns:
            return None
        i = self.index % len(columns)
        old = columns[i]
        if self.op == "remove":
            return Schema(keys, columns[:i] + columns[i + 1:])
        if self.op == "retype":
            same_type = (self.kind == old.kind or (
                self.kind in KINDS and old.kind in KINDS
                and KINDS[self.kind].arrow == KINDS[old.kind].arrow))
            if same_type or "void" in (self.kind, old.kind):
                # the same type under another kind's values ("nulls" is an all-NULL string),
                # or an untyped all-NULL column: no type changes
                return None
            columns[i] = Column(old.name, self.kind)
            return Schema(keys, columns)
        if self.op == "rename":
            if self.name.lower() in taken:
                return None
            columns[i] = Column(self.name, old.kind, old.fields)
            return Schema(keys, columns)
        raise ValueError(self.op)


def changes() -> st.SearchStrategy[Change]:
    return st.builds(
        Change, op=st.sampled_from(OPS), index=st.integers(0, 10),
        name=st.sampled_from(NAMES).flatmap(
            lambda n: st.integers(0, 3).map(lambda how: case_variant(n, how))),
        kind=st.sampled_from((*VALUE_KINDS, "struct")))
