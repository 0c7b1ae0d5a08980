"""Normalizers: per-column rules applied to a value before the fingerprint hashes it.

They decide what counts as a change (a CHAR column re-exported with other trailing blanks, a
code that changes case, a float re-rounded by the extract tool, a JSON text whose keys come in
another order); the published values stay as the source had them. A table's rules are part of
its fingerprint identity (recorded in each commit record, :mod:`diffcdc.state.commit`).

Rules, in the fixed order they apply when a column has several:

=================  ==================================================================  =========
rule               what the hashed value becomes                                       types
=================  ==================================================================  =========
``json``           canonical JSON text: keys sorted, no insignificant whitespace,      string
                   non-ASCII as ``\\uXXXX``; numbers with a fraction or exponent as
                   doubles (``1.0`` = ``1.00`` = ``1e0``, but ``1`` ≠ ``1.0``); a
                   repeated key keeps its last value. Text that is not valid JSON is
                   compared as it is.
``trim``           leading and trailing ASCII whitespace removed (space, tab, LF,      string
                   CR, FF, VT)
``rtrim``          trailing spaces (U+0020, a CHAR column's padding) removed           string
``casefold``       lower case by Unicode's full mapping, as Spark SQL's ``lower()``    string
                   (Java's ``toLowerCase``): ``'ß'`` stays ``'ß'`` (Python's
                   ``casefold()`` would make it ``'ss'``), ``'İ'`` becomes ``'i̇'``
``empty_as_null``  ``''`` becomes NULL                                                 string
``round:N``        rounded half away from zero to N digits after the point (N ≥ 0);   float,
                   a decimal is hashed at scale N (unchanged when its scale is at      double,
                   most N); a double ``x`` as ``round(x·10^N) / 10^N`` when            decimal
                   ``|x·10^N| < 2^52``, else unchanged (NaN, ±inf unchanged)
=================  ==================================================================  =========

Spark computes them as Spark SQL (:func:`normalized_sql`), except ``json``: Spark 3.5 has no
SQL function that parses JSON without a schema (Spark 4's ``to_json(parse_json(x))`` sorts
keys but does not exist on 3.5, so a table's fingerprints would change with its Spark; it
also reads ``1.00`` as ``1`` but ``1e0`` as ``1.0``: measured on 4.3), so it is a Python UDF (:func:`canonical_json`, the
same function the reference calls), registered per session by :func:`register_functions` and
run only for the columns that have the rule; the executors import this module (see
:mod:`diffcdc.engine.executors`). :func:`python_normalizer` is the pure-Python mirror the
fingerprint reference (:mod:`diffcdc.core.fingerprint_ref`) and the checks use.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyspark is imported where a type is looked at: a config loads without it
    from pyspark.sql import types as T

#: The rules in the order they apply ("round" takes its digits as ``round:N``).
ORDER = ("json", "trim", "rtrim", "casefold", "empty_as_null", "round")
STRING_RULES = frozenset(ORDER[:-1])
#: What ``trim`` removes at both ends.
TRIM_CHARS = " \t\n\r\f\v"
#: Doubles at least this large (times 10^N) are integers already: ``round:N`` leaves them.
_EXACT_LIMIT = 2.0**52
MAX_DIGITS = 38
#: The name the ``json`` rule's Python UDF is registered under in a session.
JSON_FUNCTION = "__diffcdc_canonical_json"
_DECIMALS = Context(prec=200, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Rule:
    """One rule: its name and, for ``round``, the digits after the point."""

    name: str
    digits: int | None = None

    @classmethod
    def parse(cls, text: str) -> Rule:
        """``"trim"``, ``"round:2"`` ...; raises ValueError naming the known rules."""
        name, sep, arg = text.strip().partition(":")
        if name not in ORDER:
            raise ValueError(f"unknown normalizer {text!r}; known: "
                             + ", ".join("round:N" if r == "round" else r for r in ORDER))
        if name != "round":
            if sep:
                raise ValueError(f"normalizer {name!r} takes no argument (not {text!r})")
            return cls(name)
        if not arg.strip().isdigit() or int(arg) > MAX_DIGITS:
            raise ValueError(f"normalizer {text!r}: give the digits after the point, "
                             f"round:N with N from 0 to {MAX_DIGITS}")
        return cls(name, int(arg))

    def __str__(self) -> str:
        return self.name if self.digits is None else f"{self.name}:{self.digits}"


@dataclass(frozen=True)
class ColumnRules:
    """The rules of one column, in :data:`ORDER`; ``column`` as the user spells it."""

    column: str
    rules: tuple[Rule, ...]

    def names(self) -> list[str]:
        return [str(r) for r in self.rules]

    def fits(self, dtype: T.DataType) -> str | None:
        """None when every rule fits a column of ``dtype``, else why not (in words)."""
        from pyspark.sql import types as T

        text = isinstance(dtype, (T.StringType, T.CharType, T.VarcharType))
        number = isinstance(dtype, (T.FloatType, T.DoubleType, T.DecimalType))
        for rule in self.rules:
            if rule.name in STRING_RULES and not text:
                return f"{rule} needs a string column, {self.column!r} is {dtype.simpleString()}"
            if rule.name == "round" and not number:
                return (f"{rule} needs a float, double or decimal column, {self.column!r} is "
                        f"{dtype.simpleString()}")
        return None


@dataclass(frozen=True)
class Normalizers:
    """A table's normalizers: at most one entry per column (case-blind), sorted by name."""

    columns: tuple[ColumnRules, ...] = ()

    @classmethod
    def parse(cls, spec: Mapping[str, Iterable[str]]) -> Normalizers:
        """From ``{column: ["trim", "round:2", ...]}`` (the config's and the record's shape);
        raises ValueError for an unknown rule, a repeated rule or column, or no rule."""
        seen: dict[str, str] = {}
        out = []
        for column, given in spec.items():
            if not column or not column.strip():
                raise ValueError("a normalized column needs a name")
            other = seen.setdefault(column.lower(), column)
            if other != column:
                raise ValueError(f"columns {other!r} and {column!r} are one column (names "
                                 "match case-blind): give its rules once")
            if isinstance(given, str):
                raise ValueError(f"the rules of column {column!r} are a list, e.g. [{given!r}]")
            try:
                rules = [Rule.parse(r) for r in given]
            except ValueError as exc:
                raise ValueError(f"column {column!r}: {exc}") from None
            if not rules:
                raise ValueError(f"column {column!r} has no normalizer; leave it out")
            names = [r.name for r in rules]
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"column {column!r} names {', '.join(repeated)} more than once")
            rules.sort(key=lambda r: ORDER.index(r.name))
            if rules[-1].name == "round" and len(rules) > 1:
                raise ValueError(f"column {column!r}: round:N is for numbers, "
                                 f"{', '.join(str(r) for r in rules[:-1])} for strings")
            out.append(ColumnRules(column, tuple(rules)))
        return cls(tuple(sorted(out, key=lambda c: c.column.lower())))

    def __bool__(self) -> bool:
        return bool(self.columns)

    def get(self, column: str) -> ColumnRules | None:
        """The rules of ``column`` (case-blind), or None."""
        for c in self.columns:
            if c.column.lower() == column.lower():
                return c
        return None

    def to_record(self) -> dict[str, list[str]]:
        """``{column: [rule, ...]}``: the config's shape, as a commit record holds it."""
        return {c.column: c.names() for c in self.columns}

    def describe(self) -> str:
        """``code: trim, casefold; amount: round:2`` (``none`` without rules)."""
        return "; ".join(f"{c.column}: {', '.join(c.names())}" for c in self.columns) or "none"

    def uses_json(self) -> bool:
        return any(r.name == "json" for c in self.columns for r in c.rules)

    def only(self, names: Iterable[str]) -> Normalizers:
        """The rules of the columns in ``names`` (case-blind), spelled as ``names`` spell them."""
        spelled = {n.lower(): n for n in names}
        return Normalizers(tuple(ColumnRules(spelled[c.column.lower()], c.rules)
                                 for c in self.columns if c.column.lower() in spelled))

    def same_as(self, other: Normalizers) -> bool:
        """The same rules on the same columns (names compared case-blind)."""
        def key(n: Normalizers) -> list[tuple[str, tuple[Rule, ...]]]:
            return sorted((c.column.lower(), c.rules) for c in n.columns)
        return key(self) == key(other)


NO_RULES = Normalizers()


# ----------------------------------------------------------------------------- Spark SQL


def normalized_type(rules: ColumnRules | None, dtype: T.DataType) -> T.DataType:
    """The type of the value hashed: a decimal rounded to fewer digits than its scale has
    the scale N (and the precision its integral digits need, one more for a carry)."""
    from pyspark.sql import types as T

    if rules is None or not isinstance(dtype, T.DecimalType):
        return dtype
    digits = _round_digits(rules)
    if digits is None or digits >= dtype.scale:
        return dtype
    return T.DecimalType(dtype.precision - dtype.scale + 1 + digits, digits)


def _round_digits(rules: ColumnRules) -> int | None:
    return next((r.digits for r in rules.rules if r.name == "round"), None)


def normalized_sql(value: str, rules: ColumnRules | None, dtype: T.DataType) -> str:
    """Spark SQL of ``value`` (an expression of type ``dtype``) with ``rules`` applied; NULL
    stays NULL."""
    from diffcdc.core.sql import text

    if rules is None:
        return value
    for rule in rules.rules:
        if rule.name == "json":
            value = f"{JSON_FUNCTION}({value})"
        elif rule.name == "trim":  # the SQL form: the functions' argument orders differ
            value = f"trim(BOTH {text(TRIM_CHARS)} FROM {value})"
        elif rule.name == "rtrim":
            value = f"trim(TRAILING ' ' FROM {value})"
        elif rule.name == "casefold":
            value = f"lower({value})"
        elif rule.name == "empty_as_null":
            value = f"nullif({value}, '')"
        elif rule.name == "round":
            assert rule.digits is not None
            value = _round_sql(value, rule.digits, dtype)
    return value


def _round_sql(value: str, digits: int, dtype: T.DataType) -> str:
    from pyspark.sql import types as T

    if isinstance(dtype, T.DecimalType):
        if digits >= dtype.scale:
            return value
        out = normalized_type(ColumnRules("", (Rule("round", digits),)), dtype)
        assert isinstance(out, T.DecimalType)
        return f"CAST(round({value}, {digits}) AS DECIMAL({out.precision}, {digits}))"
    x = f"CAST({value} AS DOUBLE)"
    scaled = f"{x} * 1E{digits}D"  # both IEEE doubles: the reference multiplies the same
    return (f"CASE WHEN abs({scaled}) < {_EXACT_LIMIT!r}D THEN round({scaled}, 0) / "
            f"1E{digits}D ELSE {x} END")


def register_functions(spark: Any, normalize: Normalizers) -> None:
    """Register the Python UDF the ``json`` rule needs in ``spark``'s session (nothing
    without such a rule). A Spark Connect session registers it on its server."""
    from pyspark.sql import types as T

    if not normalize.uses_json():
        return
    spark.udf.register(JSON_FUNCTION, canonical_json, T.StringType())


# ----------------------------------------------------------------------------- Python


def canonical_json(raw: str | None) -> str | None:
    """The canonical JSON text of ``raw`` (see the module docstring); not JSON: as it is."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except (ValueError, RecursionError):  # nested deeper than Python's recursion allows
        return raw


def python_normalizer(
    rules: ColumnRules | None, dtype: T.DataType
) -> Callable[[Any], Any] | None:
    """The rules as a function of a non-NULL Python value (as pyarrow's ``to_pylist()`` gives
    it; a decimal also as the bytes its hash takes, see
    :func:`diffcdc.state.check_read.arrow_values`), the same as :func:`normalized_sql`
    computes in Spark; returns None for a value that becomes NULL. None: no rules."""
    if rules is None:
        return None
    steps: list[Callable[[Any], Any]] = []
    for rule in rules.rules:
        if rule.name == "json":
            steps.append(canonical_json)
        elif rule.name == "trim":
            steps.append(lambda s: s.strip(TRIM_CHARS))
        elif rule.name == "rtrim":
            steps.append(lambda s: s.rstrip(" "))
        elif rule.name == "casefold":
            steps.append(str.lower)
        elif rule.name == "empty_as_null":
            steps.append(lambda s: None if s == "" else s)
        elif rule.name == "round":
            assert rule.digits is not None
            steps.append(_round_python(rule.digits, dtype))

    def normalized(value: Any) -> Any:
        for step in steps:
            if value is None:
                return None
            value = step(value)
        return value

    return normalized


def _round_python(digits: int, dtype: T.DataType) -> Callable[[Any], Any]:
    from pyspark.sql import types as T

    if isinstance(dtype, T.DecimalType):
        scale, wide = dtype.scale, dtype.precision > 18
        quantum = Decimal(1).scaleb(-digits)

        def decimal_round(value: Decimal | int | bytes) -> Any:
            if digits >= scale:
                return value
            if isinstance(value, bytes):  # the hash input: the unscaled value
                unscaled = int.from_bytes(value, "big" if wide else "little", signed=True)
                value = Decimal(unscaled).scaleb(-scale, _DECIMALS)
            return Decimal(value).quantize(quantum, context=_DECIMALS)

        return decimal_round
    power = float(10**digits)

    def double_round(value: float) -> float:
        x = float(value)
        scaled = x * power
        if not abs(scaled) < _EXACT_LIMIT:  # NaN and ±inf too
            return x
        return float(int(Decimal(scaled).quantize(Decimal(1), context=_DECIMALS))) / power

    return double_round


def compared_value(rules: ColumnRules, dtype: T.DataType) -> Callable[[Any], Any]:
    """A column's values as ``diffcdc verify`` compares a sink's with a snapshot's: through
    its rules, a number a sink holds as text (a landing CSV) parsed first; a value of a type
    the rules do not take is compared as it is."""
    from pyspark.sql import types as T

    normalized = python_normalizer(rules, dtype)
    assert normalized is not None
    numbers = any(r.name == "round" for r in rules.rules)
    decimal = isinstance(dtype, T.DecimalType)

    def value(v: Any) -> Any:
        if v is None:
            return None
        if numbers:
            if isinstance(v, str):
                try:
                    v = Decimal(v) if decimal else float(v)
                except (ValueError, ArithmeticError):
                    return v
            if decimal and isinstance(v, float):
                return v
            if not isinstance(v, (float, int, Decimal)):
                return v
            return normalized(v)
        return normalized(v) if isinstance(v, str) else v

    return value
