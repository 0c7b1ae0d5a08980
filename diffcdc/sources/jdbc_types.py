"""How each database column is read so that no value changes (pure: no IO, no Spark).

Spark's JDBC reader maps types on its own, and some mappings change values without an error:
PostgreSQL ``numeric(50,10)`` becomes decimal(38,0) (1.5 → 2), an unconstrained ``numeric``
decimal(38,18) (1e-24 → 0), ``time`` a timestamp on 1970-01-01 cut to milliseconds,
``'infinity'`` the timestamp 9999-12-31 23:59:59.999, a date in the ten days the Julian
calendar skipped (1582-10-05 to 14) a date ten days later. :func:`plan_read` looks at the
columns (their JDBC metadata, read before any row) and decides per column:

* read as it is: Spark's own mapping keeps every value (integers, text, bytea, uuid, json, ...);
* read as the database's text of each value (``::text``): money, time, timetz, interval,
  bit(n), or any column ``column_types`` maps to ``"string"``;
* read as a decimal whose range is checked value by value *in the read's own query*: every
  ``numeric`` (a value that does not fit — NaN, Infinity, more digits — fails the read);
* read as it is with each value checked: dates and timestamps (infinity, the calendar gap, past
  Spark's last timestamp) and arrays of them;
* refused before anything is read (:class:`~diffcdc.errors.InputRefused`): a numeric wider than
  Spark's decimal(38) with no mapping chosen (``wide_numeric``, ``column_types``), an array
  type Spark cannot read exactly.

A value check fails the database query with a text marked :data:`MARK` (PostgreSQL evaluates
``'<message>'::int`` only for a row that fails the check); :func:`refusal_in` finds it in the
error again. The checks are PostgreSQL SQL; MariaDB / MySQL: :mod:`diffcdc.sources.jdbc_mysql`;
other databases get the width check and ``string``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from diffcdc.errors import ConfigError, InputRefused

#: Marks the text of a value check's failure inside a database error message.
MARK = "diffcdc-refused"
_REFUSAL = re.compile(re.escape(MARK) + r": (.*?) :" + re.escape(MARK))
MAX_PRECISION = 38
#: java.sql.Types codes.
_NUMERIC_TYPES = {2, 3}  # NUMERIC, DECIMAL
_ARRAY = 2003
_TIME = 92
#: A domain over a date or timestamp: its JDBC type (a timestamp's zone unknown: the wider gap).
_MOMENTS = {91: "date", 93: "timestamptz"}
#: PostgreSQL types whose every value Spark's reader keeps (scalars and array elements).
_EXACT = {
    "int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar", "name",
    "uuid", "json", "jsonb", "bytea", "oid", "xml", "char", "citext",
}
#: PostgreSQL types read as their text: Spark's own mapping changes them or cannot read them.
_AS_TEXT = {"money", "time", "timetz", "interval", "varbit"}
#: Spark's timestamps end in year 294247 (a long of microseconds); PostgreSQL's in 294276.
_LAST_TIMESTAMP = "294247-01-01"
#: Dates and times Java's Julian-Gregorian calendar (through which the driver hands them
#: over) shifts by ten days; for timestamptz a day wider each side (any session time zone).
_GAP = {
    "date": ("1582-10-05", "1582-10-15"),
    "timestamp": ("1582-10-05", "1582-10-15"),
    "timestamptz": ("1582-10-04", "1582-10-16"),
}
WIDE_HINT = 'wide_numeric = "string" or "decimal"'


@dataclass(frozen=True)
class Column:
    """One column of the relation as the JDBC driver describes it (ResultSetMetaData)."""

    name: str
    jdbc_type: int
    type_name: str  #: the database's name; PostgreSQL arrays: ``_numeric`` for numeric[]
    precision: int
    scale: int


@dataclass(frozen=True)
class ReadPlan:
    """How the relation is read: the relation Spark reads (a wrapping query, or the relation as
    it is), a Spark ``customSchema``, and Spark expressions over the rows read (None: as read)."""

    relation: str
    custom_schema: str | None = None
    spark_select: tuple[str, ...] | None = None


@dataclass(frozen=True)
class _Numeric:
    precision: int  #: 0: unconstrained
    scale: int

    @property
    def text(self) -> str:
        return f"numeric({self.precision},{self.scale})" if self.precision else "numeric"

    def exact_decimal(self) -> tuple[int, int] | None:
        """The Spark decimal that holds every value of this type, if there is one."""
        if not self.precision:
            return None
        if self.scale < 0:  # numeric(5,-2): integers rounded to hundreds, up to 7 digits
            precision, scale = self.precision - self.scale, 0
        else:  # numeric(3,5): 0.00123 — five digits after the point
            precision, scale = max(self.precision, self.scale), self.scale
        return (precision, scale) if precision <= MAX_PRECISION else None


def numeric_of(column: Column) -> _Numeric:
    """Precision and scale of a (PostgreSQL) numeric column; its negative scale decoded.

    PostgreSQL's driver reports the scale as the typmod's 11 bits, so numeric(5,-2) comes as
    scale 2046."""
    scale = column.scale - 2048 if column.scale > 1000 else column.scale
    return _Numeric(column.precision, scale)


def db_type(column: Column) -> str:
    """The column's type as the database would print it (for messages)."""
    name = column.type_name
    array = column.jdbc_type == _ARRAY and name.startswith("_")
    base = name[1:] if array else name
    if base == "numeric":
        base = numeric_of(column).text
    elif column.jdbc_type in _NUMERIC_TYPES and column.precision:
        base = f"{base}({column.precision},{column.scale})"
    return base + ("[]" if array else "")


def quote(name: str) -> str:
    """A PostgreSQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _parse_decimal(kind: str) -> tuple[int, int] | None:
    found = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", kind.strip(), re.I)
    return (int(found.group(1)), int(found.group(2))) if found else None


def refusal_in(text: str) -> str | None:
    """The value check's message inside a database error text, if it is one."""
    found = _REFUSAL.search(text)
    return found.group(1) if found else None


def plan_read(
    columns: list[Column], *, relation: str, postgres: bool, wide_numeric: str,
    column_types: Mapping[str, str], table: str, enums: frozenset[str] = frozenset(),
    partition_column: str | None = None, is_query: bool = False, jvm_zone: str = "UTC",
) -> ReadPlan:
    """How to read ``relation`` so that every value arrives unchanged (see the module doc).

    ``jvm_zone``: the time zone of Spark's JVM when it is not UTC (PostgreSQL's driver hands a
    ``timestamp`` without time zone over as a wall clock in that zone: it would be shifted).
    Raises :class:`InputRefused` (exit 3) for a column no mapping reads exactly, and
    :class:`ConfigError` for a ``column_types`` entry that names no column of the relation.
    MariaDB / MySQL: :func:`diffcdc.sources.jdbc_mysql.plan_mysql`.
    """
    check_column_types(columns, column_types, table)
    if postgres:
        return _plan_postgres(columns, relation, wide_numeric, column_types, table, enums,
                              partition_column, is_query, jvm_zone)
    return _plan_other(columns, relation, wide_numeric, column_types, table)


def check_column_types(columns: list[Column], column_types: Mapping[str, str], table: str
                       ) -> None:
    """Refuse a ``column_types`` entry that names no column of the relation (ConfigError)."""
    names = [c.name for c in columns]
    unknown = [n for n in column_types if n not in names]
    if unknown:
        raise ConfigError(
            f"column_types names column {unknown[0]}, which the source does not have",
            table=table,
            hint="its columns: " + ", ".join(names),
        )


def refuse(column: Column, table: str, why: str, hint: str) -> InputRefused:
    return InputRefused(
        f"column {column.name} has database type {db_type(column)}, {why}; nothing was read",
        table=table,
        hint=hint,
    )


def string_hint(column: Column) -> str:
    return (f'read it as text with column_types = {{ {column.name} = "string" }} in the table\'s '
            "source (docs/sources.md)")


def wide_hint(column: Column) -> str:
    return (f"choose a mapping in the table's source: {WIDE_HINT}, or column_types = "
            f'{{ {column.name} = "string" }} (docs/sources.md)')


class _Select:
    """The wrapping query being built: per column, its expression and its value check.

    A check sits in the column's own expression (``CASE WHEN ok THEN value ELSE <fail>
    END``): PostgreSQL evaluates it only for rows the query returns, after the user query's
    own conditions. The partition column's check goes to the WHERE clause instead, so that
    Spark's range conditions on that column still use its index; a user query is then read
    behind ``OFFSET 0`` (its own conditions first, the check after).
    """

    def __init__(self, partition_column: str | None) -> None:
        self.partition = (partition_column or "").lower()
        self.items: list[str] = []
        self.where: list[str] = []
        self.changed = False

    def add(self, column: Column, expr: str | None = None,
            check: tuple[str, str, str] | None = None, sql_type: str | None = None) -> None:
        """``expr``: what to read (None: the column as it is); ``check``: (condition that
        holds for a value read unchanged, the value to show, the type it is read as);
        ``sql_type``: the type a checked value keeps (a CASE drops numeric's precision)."""
        value = expr or quote(column.name)
        if check is not None:
            condition, shown, target = check
            message = (f"{MARK}: column {column.name} ({db_type(column)}) holds a value {target} "
                       "cannot hold exactly: ")
            fail = f"({_literal(message)} || left(({shown})::text, 60) || ' :{MARK}')::int = 0"
            if column.name.lower() == self.partition and expr is None:
                self.where.append(f"CASE WHEN NOT ({condition}) THEN {fail} ELSE true END")
            else:  # the inner CASE has the value's type and fails when evaluated
                value = f"CASE WHEN {condition} THEN {value} ELSE CASE WHEN {fail} THEN {value} END END"
                value = f"({value})::{sql_type}" if sql_type else value
        if value == quote(column.name):
            self.items.append(value)
        else:
            self.items.append(f"{value} AS {quote(column.name)}")
            self.changed = True

    def query(self, relation: str, is_query: bool) -> str:
        if self.where and is_query:
            relation = f"(SELECT * FROM {relation} OFFSET 0) diffcdc_query"
        sql = f"SELECT {', '.join(self.items)} FROM {relation}"
        if self.where:
            sql += " WHERE " + " AND ".join(self.where)
        return f"({sql}) diffcdc_read"


def _plan_postgres(
    columns: list[Column], relation: str, wide_numeric: str, column_types: Mapping[str, str],
    table: str, enums: frozenset[str], partition_column: str | None, is_query: bool,
    jvm_zone: str,
) -> ReadPlan:
    select = _Select(partition_column)
    for column in columns:
        wanted = column_types.get(column.name)
        if jvm_zone != "UTC" and column.type_name.lstrip("_") == "timestamp" and wanted is None:
            raise refuse(
                column, table,
                f"a wall clock Spark's JVM would read in its time zone {jvm_zone} (shifted)",
                "run Spark's JVMs in UTC: -Duser.timezone=UTC in spark.driver.extraJavaOptions "
                f'and spark.executor.extraJavaOptions; or column_types = {{ {column.name} = '
                '"string" }',
            )
        _postgres_column(select, column, wide_numeric, wanted, table, enums)
    return ReadPlan(select.query(relation, is_query) if select.changed or select.where else relation)


def _postgres_column(
    select: _Select, column: Column, wide_numeric: str, wanted: str | None, table: str,
    enums: frozenset[str],
) -> None:
    col = quote(column.name)
    name = column.type_name
    array = column.jdbc_type == _ARRAY and name.startswith("_")
    base = name[1:] if array else name
    if wanted is not None and wanted.strip().lower() == "string":
        select.add(column, f"{col}::text")
        return
    if wanted is not None:
        precision, scale = _parse_decimal(wanted) or (0, 0)
        if base not in ("numeric", "money") and column.jdbc_type not in _NUMERIC_TYPES:
            raise ConfigError(
                f"column_types maps column {column.name} ({db_type(column)}) to {wanted}; a "
                "decimal applies to numeric and money columns",
                table=table, hint=string_hint(column),
            )
        _decimal(select, column, precision, scale, array, cast=True)
        return
    if base == "numeric" or (not array and column.jdbc_type in _NUMERIC_TYPES):
        numeric = numeric_of(column)
        exact = numeric.exact_decimal()
        if exact is not None:  # Spark's own mapping is right unless the scale is negative
            _decimal(select, column, *exact, array, cast=numeric.scale < 0)
        elif wide_numeric == "string":
            select.add(column, f"{col}::text")
        elif wide_numeric == "decimal":
            scale = numeric.scale if column.precision else 18
            _decimal(select, column, MAX_PRECISION, min(max(scale, 0), MAX_PRECISION), array,
                     cast=True)
        else:
            raise refuse(column, table, "wider than Spark's decimal (38 digits)",
                          wide_hint(column))
        return
    moment = base if base in _GAP else _MOMENTS.get(column.jdbc_type) if not array else None
    if moment is not None:  # a date or timestamp, or a domain over one
        _moment(select, column, moment, array)
        return
    as_text = base in _AS_TEXT or (not array and column.jdbc_type == _TIME)
    if as_text or (base == "bit" and (array or column.precision > 1)):
        if array:
            raise refuse(column, table, "an array Spark cannot read exactly",
                          string_hint(column))
        select.add(column, f"{col}::text")
        return
    if array and base not in _EXACT and name not in enums:
        raise refuse(column, table, "an array Spark cannot read exactly", string_hint(column))
    select.add(column)  # Spark's mapping keeps every value (or reads the text: inet, ranges)


def _decimal(select: _Select, column: Column, precision: int, scale: int, array: bool, *,
             cast: bool) -> None:
    """Read as decimal(precision, scale), each value checked to fit (NaN, Infinity do not);
    ``cast``: Spark's own mapping of the column's type is not that decimal."""
    col = quote(column.name)
    money = column.type_name.lstrip("_") == "money"
    source = f"{col}::numeric" if money else col
    target = f"decimal({precision},{scale})"
    limit = f"1e{precision - scale}"
    expr = f"{source}::numeric({precision},{scale})" if cast or money else None
    if array:
        fits = f"x = round(x, {scale}) AND abs(x) < {limit}"
        bad = f"(SELECT x FROM unnest({source}) x WHERE x IS NOT NULL AND NOT ({fits}) LIMIT 1)"
        select.add(column, expr and expr + "[]", (f"{bad} IS NULL", bad, target),
                   f"numeric({precision},{scale})[]")
        return
    # NaN = NaN and round(NaN) = NaN in PostgreSQL, but NaN and ±Infinity fail the abs test.
    fits = f"{source} IS NULL OR ({source} = round({source}, {scale}) AND abs({source}) < {limit})"
    select.add(column, expr, (fits, source, target), f"numeric({precision},{scale})")


def _moment(select: _Select, column: Column, base: str, array: bool) -> None:
    """A date or timestamp, read as it is; each value checked to arrive unchanged."""
    low, high = _GAP[base]
    last = "" if base == "date" else f" AND {{v}} < '{_LAST_TIMESTAMP}'"
    ok = f"isfinite({{v}}) AND NOT ({{v}} >= '{low}' AND {{v}} < '{high}'){last}"
    target = "Spark's date" if base == "date" else "Spark's timestamp"
    col = quote(column.name)
    if array:
        bad = (f"(SELECT x FROM unnest({col}) x WHERE x IS NOT NULL AND NOT ({ok.format(v='x')}) "
               "LIMIT 1)")
        select.add(column, None, (f"{bad} IS NULL", bad, target))
    else:
        select.add(column, None, (f"{col} IS NULL OR ({ok.format(v=col)})", col, target))


def _plan_other(
    columns: list[Column], relation: str, wide_numeric: str, column_types: Mapping[str, str],
    table: str,
) -> ReadPlan:
    """Databases other than PostgreSQL: a numeric wider than decimal(38) is read as its text
    (``string``) or refused; value-checked decimals need PostgreSQL."""
    strings: list[str] = []
    for column in columns:
        wanted = (column_types.get(column.name) or "").strip().lower()
        wide = column.jdbc_type in _NUMERIC_TYPES and not (
            0 < column.precision <= MAX_PRECISION and 0 <= column.scale <= column.precision
        )
        if wanted == "string" or (wide and not wanted and wide_numeric == "string"):
            strings.append(column.name)
        elif wanted or (wide and wide_numeric == "decimal"):
            raise ConfigError(
                f"column {column.name}: a decimal checked value by value needs PostgreSQL",
                table=table, hint=string_hint(column),
            )
        elif wide:
            raise refuse(column, table, "wider than Spark's decimal (38 digits)",
                          f'choose column_types = {{ {column.name} = "string" }} or '
                          'wide_numeric = "string" in the table\'s source (docs/sources.md)')
    schema = ", ".join("`" + n.replace("`", "``") + "` STRING" for n in strings)
    return ReadPlan(relation, schema or None)
