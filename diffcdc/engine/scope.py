"""A scoped table's checks and plan on Spark (:mod:`diffcdc.core.scope`): the predicate parsed
as soon as a session exists, then per snapshot its columns found, its type checked and the
snapshot's scope checked not to be empty, before anything is staged or published."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
from collections.abc import Callable, Iterator

from pyspark.errors import AnalysisException, ParseException, PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from diffcdc.config import TableConfig
from diffcdc.core.classify import ClassifyScope
from diffcdc.core.normalize import ColumnRules, Normalizers, normalized_sql
from diffcdc.core.scope import (
    SNAPSHOT_TIME,
    ScopeConfig,
    ScopeSlots,
    enclosed,
    fill_where,
    plan_slots,
)
from diffcdc.core.sql import has_map, quote
from diffcdc.errors import ConfigError, InputRefused
from diffcdc.state.commit import CommitRecord

_FIX = "fix [tables.{table}.scope] where in the config file"
_PROBE = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


class _Drop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def _quiet_analysis() -> Iterator[None]:
    """PySpark logs every analysis error of SQL text to stderr (its SQLQueryContextLogger);
    the scope's checks turn such an error into their own one-line message, so that log line
    is left out while they run."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark before 4 logs none
        yield
        return
    logger, drop = PySparkLogger.getLogger("SQLQueryContextLogger"), _Drop()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _sql_state(exc: PySparkException) -> str | None:
    """The SQLSTATE of a Spark error (class 22: a value an expression cannot take)."""
    try:
        return exc.getSqlState()
    except Exception:  # noqa: BLE001 - an error that cannot say
        return None


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "getMessage", lambda: str(exc))() or str(exc)
    return " ".join(text.split("\n")[0].split())[:300]


def check_where_syntax(spark: SparkSession, table: TableConfig) -> None:
    """Refuse (exit 2) a scope predicate that does not parse, before any snapshot is read.

    Columns cannot be checked yet (they are the snapshot's): an unknown one is named once the
    snapshot's schema is known (:func:`plan_scope`)."""
    scope = table.scope
    if scope is None or scope.where is None:
        return
    where = fill_where(scope.where, _PROBE)
    try:
        with _quiet_analysis():
            spark.range(0).selectExpr(f"{enclosed(where)} AS `__diffcdc_where`").schema  # noqa: B018
    except ParseException as exc:
        raise ConfigError(
            f"the scope's where {scope.where!r} does not parse: {_first_line(exc)}",
            table=table.name, hint=_FIX.format(table=table.name)) from None
    except AnalysisException:
        return  # unknown columns are the snapshot's: plan_scope checks them against its schema


def plan_scope(
    df: DataFrame, table: TableConfig, keys: list[str], as_of: dt.datetime | None,
    previous: CommitRecord | None, snapshot: str, path: str | None,
    rollback_time: dt.datetime | None = None,
) -> ClassifyScope | None:
    """The scope of one snapshot's classification (None: the table has none); refuses a scope
    column the snapshot lacks (exit 3), a predicate over no or unknown columns or not boolean
    (exit 2), and a snapshot with no row in the predicate's scope (exit 3).

    ``rollback_time``: a rollback's snapshot's own time (the version is as of the head's,
    ``as_of``). A ``{snapshot_time}`` window then covers what either time covers: a key the
    snapshot lacks inside its own window did not exist then (a late insert with an older
    date), one inside the head's window came after it; both are deleted."""
    scope = table.scope
    if scope is None:
        return None
    check_scope_columns(df, table, snapshot, path)
    names = {c.lower(): c for c in df.columns}
    where = _where(scope, as_of, table.name)
    if (where is not None and rollback_time is not None and rollback_time != as_of
            and SNAPSHOT_TIME in (scope.where or "")):
        then = _where(scope, rollback_time, table.name)
        assert then is not None
        where = f"{enclosed(then)} OR {enclosed(where)}"
    slots = plan_slots(df.columns, keys, [names[c.lower()] for c in scope.columns], where)
    maps = [c for c in slots.stored if has_map(df.schema[c].dataType)]
    if maps:
        raise ConfigError(
            f"the scope reads column(s) {', '.join(maps)}, which hold a map: Spark cannot "
            "compare map values (a snapshot's distinct values, a key's stored ones)",
            table=table.name, snapshot=snapshot, hint="scope by columns of plain values (the "
            f"map's entry as a column of its own in the extract) in [tables.{table.name}.scope]")
    if where is not None:
        _check_where(df, slots, scope, table.name, snapshot, path)
    types = {c: df.schema[c].dataType.simpleString() for c in slots.stored}
    before = previous.scope.stored if previous is not None and previous.scope else None
    return ClassifyScope(slots, tuple(before) if before is not None else None, types,
                         compared_through(df, slots, table.normalizers))


def compared_through(df: DataFrame, slots: ScopeSlots, normalize: Normalizers
                     ) -> dict[str, Callable[[str], str]]:
    """The scope columns' values as their normalizers make them (see
    :class:`~diffcdc.core.classify.ClassifyScope`); a rule that does not fit the column's type
    is refused with the normalizers' own check, before the diff."""
    out: dict[str, Callable[[str], str]] = {}
    for column in slots.columns:
        rules = normalize.get(column)
        if rules is None or rules.fits(df.schema[column].dataType) is not None:
            continue
        out[column] = functools.partial(_normalized, rules=rules,
                                        dtype=df.schema[column].dataType)
    return out


def _normalized(value: str, *, rules: ColumnRules, dtype: T.DataType) -> str:
    return normalized_sql(value, rules, dtype)


def check_scope_columns(df: DataFrame, table: TableConfig, snapshot: str, path: str | None
                        ) -> None:
    """Refuse (exit 3) a snapshot without one of the scope's columns: it cannot say what it
    covers (checked before its schema is compared with the last one: the more exact reason)."""
    if table.scope is None:
        return
    names = {c.lower() for c in df.columns}
    missing = [c for c in table.scope.columns if c.lower() not in names]
    if missing:
        raise InputRefused(
            f"the scope column(s) {', '.join(missing)} are not in the snapshot (its columns: "
            f"{', '.join(df.columns)})", table=table.name, snapshot=snapshot, path=path,
            hint="a scoped snapshot must hold its scope columns: fix the extract, or the "
            f"scope's columns in [tables.{table.name}.scope]")


def _where(scope: ScopeConfig, as_of: dt.datetime | None, table: str) -> str | None:
    if scope.where is None:
        return None
    where = fill_where(scope.where, as_of)
    if where is None:
        raise ConfigError(
            f"the scope's where {scope.where!r} uses {{snapshot_time}} but the snapshot has no "
            "as-of time", table=table,
            hint="give run_dataframe a snapshot_time, or write the window without "
            "{snapshot_time}")
    return where


def _check_where(df: DataFrame, slots: ScopeSlots, scope: ScopeConfig, table: str,
                 snapshot: str, path: str | None) -> None:
    if not slots.read:
        raise ConfigError(f"the scope's where {scope.where!r} names no column of the snapshot",
                          table=table, hint=_FIX.format(table=table))
    try:
        with _quiet_analysis():
            tested = df.selectExpr(f"{enclosed(slots.where)} AS `__diffcdc_where`")
            dtype = tested.schema.fields[0].dataType
    except (AnalysisException, ParseException) as exc:
        raise ConfigError(
            f"the scope's where {scope.where!r} cannot be evaluated over the snapshot: "
            f"{_first_line(exc)}", table=table, hint=_FIX.format(table=table)) from None
    if not isinstance(dtype, T.BooleanType):
        raise ConfigError(
            f"the scope's where {scope.where!r} is a {dtype.simpleString()}, not a boolean",
            table=table, hint=_FIX.format(table=table) + " (a condition: true inside the scope)")
    try:
        with _quiet_analysis():
            (row,) = tested.selectExpr(
                "count(1) AS n", f"count_if({quote('__diffcdc_where')}) AS inside").collect()
    except PySparkException as exc:
        if not str(_sql_state(exc)).startswith("22"):  # not a value it cannot take
            raise
        raise InputRefused(
            f"the scope's where {scope.where!r} fails on a value of the snapshot: "
            f"{_first_line(exc)}", table=table, snapshot=snapshot, path=path,
            hint="make the where take every value (try_cast, try_divide ...) in "
            f"[tables.{table}.scope], or fix the extract") from None
    if row["n"] and not row["inside"]:
        raise InputRefused(
            f"no row of the snapshot's {row['n']} is inside the scope's where {slots.where!r}: "
            "its scope is empty", table=table, snapshot=snapshot, path=path,
            hint="check the extract's window against the scope's where (and the snapshot's "
            "time), or remove the snapshot from the source")


def refuse_empty(table: str, snapshot: str, path: str | None) -> InputRefused:
    """A scoped snapshot without rows: it covers nothing, so it could delete nothing; refused
    rather than taken for a snapshot of nothing."""
    return InputRefused(
        "the scoped snapshot has no rows: its scope is empty", table=table, snapshot=snapshot,
        path=path, hint="check the extract; a scoped snapshot must hold the rows of its scope")


def refuse_recreate(table: str, snapshot: str, path: str | None, reason: str) -> InputRefused:
    """A scoped snapshot that would re-create the table on its own (its schema changed): the
    table would hold only the snapshot's scope, every other key gone from every sink."""
    return InputRefused(
        f"the scoped snapshot would re-create the table ({reason}), which keeps only the keys "
        "of its scope: every key outside it would be deleted from every sink",
        table=table, snapshot=snapshot, path=path,
        hint=f"re-create it on purpose from a whole snapshot with 'diffcdc reload --table {table}"
        " --yes' (with the scope removed from the config for that run), or undo the schema "
        "change")


def recorded_scope(record: CommitRecord, df: DataFrame, previous: CommitRecord | None
                   ) -> ClassifyScope | None:
    """The scope version ``record`` was diffed with, to diff its snapshot ``df`` again (a
    repair); ``previous``: the version it was diffed against."""
    if record.scope is None:
        return None
    scope = record.scope
    slots = plan_slots(df.columns, record.keys, scope.columns, scope.where)
    slots = ScopeSlots(slots.columns, slots.where, slots.read, tuple(scope.stored))
    types = {c: df.schema[c].dataType.simpleString() for c in slots.stored}
    before = previous.scope.stored if previous is not None and previous.scope else None
    return ClassifyScope(slots, tuple(before) if before is not None else None, types,
                         compared_through(df, slots, record.normalize))
