"""Scoped snapshots: what part of a table a snapshot covers (pure, no IO, no Spark).

A table's ``[tables.T.scope]`` says which keys a snapshot speaks for: with ``columns``, every key
whose values of these columns (a tuple, NULL-safe) the snapshot holds in at least one row; with
``where``, every key for which a Spark SQL predicate over the table's columns is true
(``{snapshot_time}`` in it stands for the snapshot's as-of time as a TIMESTAMP literal); with
both, a key both say so for. A key the snapshot holds is inserted, updated or unchanged as
always; a key of the previous state that the snapshot does not hold is deleted only when it is
in the scope, judged by the values it had when a snapshot last held it (the state keeps them:
:class:`ScopeSlots`), and kept (``KEPT`` in :mod:`diffcdc.core.classify`) otherwise. A key
whose values are not known (its state was written before the scope was set, or the scope now
reads a column the state did not keep) is kept: nothing is deleted that cannot be shown to be in
the scope; it gets its values the next time a snapshot holds it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field, field_validator, model_validator

from diffcdc.core.fields import STRICT_SETTINGS

#: The placeholder of a ``where`` predicate replaced by the snapshot's as-of time.
SNAPSHOT_TIME = "{snapshot_time}"
#: The state's column that says a row's scope values are known (NULL/false: not known).
SCOPED = "__diffcdc_scoped"
#: The state's columns holding the scope's values, ``__diffcdc_scope0`` ... (in the order of
#: the commit record's ``scope_columns``).
SLOT_PREFIX = "__diffcdc_scope"

#: String literals and comments, left to right (a quote inside a comment, a comment marker
#: inside a literal: each is what comes first).
_TEXT = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*|/\*.*?\*/", re.S)
_IDENT = re.compile(r"`((?:[^`]|``)+)`|([A-Za-z_][A-Za-z0-9_]*)")
_QUOTED = re.compile(r"`(?:[^`]|``)*`")
#: Spark SQL functions whose value is not a function of the row: a predicate calling one
#: would put a different set of keys in the scope each time it is evaluated (a random subset
#: deleted; a repair, rollback or verify disagreeing with the run), so it is refused.
_RANDOM = ("rand", "randn", "random", "randstr", "uniform", "uuid", "shuffle",
           "monotonically_increasing_id", "spark_partition_id", "input_file_name",
           "input_file_block_start", "input_file_block_length", "reflect", "java_method",
           "try_reflect")
_CLOCK = ("current_timestamp", "current_date", "current_time", "now", "curdate",
          "localtimestamp", "current_timezone", "current_user", "session_user", "user")
_SELECT = re.compile(r"\bselect\b", re.I)
#: Those of them Spark also takes without parentheses.
_BARE = ("current_timestamp", "current_date", "current_time", "current_user", "session_user")
_CALL = re.compile(r"\b(" + "|".join(_RANDOM + _CLOCK) + r")\s*\(|\b(" + "|".join(_BARE)
                   + r")\b(?!\s*\()|\b(unix_timestamp)\s*\(\s*\)", re.I)


class ScopeConfig(BaseModel):
    """What one snapshot of the table covers (docs/scope.md): keys outside it are kept."""

    model_config = STRICT_SETTINGS

    columns: list[str] = Field(
        default_factory=list,
        description="Columns whose values (a tuple, NULL-safe) a snapshot covers: every key whose "
        "values the snapshot holds in some row, e.g. `[\"region\"]`.",
    )
    where: str | None = Field(
        default=None,
        description="A Spark SQL predicate over the table's columns: a snapshot covers the keys "
        "it is true for; `{snapshot_time}` is the snapshot's as-of time (a TIMESTAMP), e.g. "
        "`\"order_date >= add_months(CAST({snapshot_time} AS DATE), -3)\"`.",
    )

    @field_validator("columns")
    @classmethod
    def _columns(cls, value: list[str]) -> list[str]:
        if any(not c or not c.strip() for c in value):
            raise ValueError("a scope column name is empty")
        if len({c.lower() for c in value}) != len(value):
            raise ValueError(f"scope columns repeat: {value}")
        return value

    @field_validator("where")
    @classmethod
    def _where(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("the scope's where is empty")
        if value is not None:
            problem = where_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _something(self) -> ScopeConfig:
        if not self.columns and self.where is None:
            raise ValueError("a scope needs columns, a where predicate, or both")
        return self

    def keys_problem(self, keys: Sequence[str]) -> str | None:
        """Why the scope cannot work with the table's ``keys`` (None: it can): ``columns``
        holding every key column cover exactly the keys a snapshot holds, so a key it lacks is
        never in its scope and nothing could ever be deleted."""
        columns = {c.lower() for c in self.columns}
        if keys and all(k.lower() in columns for k in keys):
            return (f"the scope's columns {self.columns} hold every key column ({', '.join(keys)})"
                    ": a snapshot would cover only the keys it holds, so no key could ever be "
                    "deleted; scope by columns that group keys (a region, a company code), or "
                    "use a where predicate")
        return None


def where_problem(where: str) -> str | None:
    """Why ``where`` cannot be a scope's predicate although it may parse (None: it can):
    ``{snapshot_time}`` inside a string literal (it becomes a literal itself), a subquery, or a
    call whose value is not a function of the row's values (random, the clock, the session).
    Found by name outside literals, comments and backquoted names (no JVM call: Connect-safe);
    a user's own non-deterministic UDF is not known here."""
    for match in _TEXT.finditer(where):
        if match.group(0)[0] in "'\"" and SNAPSHOT_TIME in match.group(0):
            return (f"the scope's where {where!r} has {SNAPSHOT_TIME} inside a string literal: "
                    f"write it outside quotes, it becomes a TIMESTAMP literal itself (e.g. "
                    f"CAST({SNAPSHOT_TIME} AS DATE))")
    code = _QUOTED.sub(" ", _TEXT.sub(" ", where))
    if _SELECT.search(code):
        return (f"the scope's where {where!r} has a subquery: a key's scope must follow from "
                "its own values (a subquery's answer can change between the run and a repair "
                "or rollback); write the condition over the row's columns")
    found = _CALL.search(code)
    if found is None:
        return None
    name = next(g for g in found.groups() if g is not None)
    if name.lower() in _RANDOM:
        why = "its value is random, so a random set of keys would be in the scope (and deleted)"
    else:
        why = ("its value depends on when or by whom the predicate is evaluated, so a repair or "
               "rollback would judge the keys differently than the run did; use "
               f"{SNAPSHOT_TIME}, the snapshot's own time")
    return (f"the scope's where {where!r} calls {name}(): {why} (a column of that name: "
            "write it in backquotes)")


def enclosed(where: str) -> str:
    """``where`` as an operand of a larger expression: in parentheses, its last line ended
    (a trailing ``--`` comment would swallow what follows)."""
    return f"({where}\n)"


def time_literal(at: dt.datetime) -> str:
    """A Spark SQL TIMESTAMP literal of ``at`` (UTC, microseconds)."""
    utc = at.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return f"TIMESTAMP '{utc.isoformat(sep=' ', timespec='microseconds')}+00:00'"


def fill_where(where: str, at: dt.datetime | None) -> str | None:
    """``where`` with ``{snapshot_time}`` replaced by ``at``'s literal (None: it needs a time
    and there is none)."""
    if SNAPSHOT_TIME not in where:
        return where
    if at is None:
        return None
    return where.replace(SNAPSHOT_TIME, time_literal(at))


def identifiers(predicate: str) -> list[str]:
    """The words of ``predicate`` that may name a column, in order, once each: backquoted names
    and bare identifiers outside string literals (function names and keywords too: a caller
    keeps those that are columns; naming one too many only stores a column more)."""
    out: list[str] = []
    for match in _IDENT.finditer(_TEXT.sub(" ", predicate.replace(SNAPSHOT_TIME, " "))):
        name = match.group(1).replace("``", "`") if match.group(1) is not None else match.group(2)
        if name not in out:
            out.append(name)
    return out


@dataclass(frozen=True)
class ScopeSlots:
    """Where a version's scope lives: the snapshot's columns it reads, as the snapshot spells
    them, and which of them the state keeps in slots (the key columns need none)."""

    columns: tuple[str, ...]  #: the ``columns`` part (a tuple of values per key)
    where: str | None  #: the predicate, its placeholder filled
    read: tuple[str, ...]  #: every snapshot column the predicate names (the key columns too)
    stored: tuple[str, ...]  #: non-key columns the state keeps, slot 0 first

    def slot(self, column: str) -> str:
        """The state's column that holds ``column``'s values."""
        return f"{SLOT_PREFIX}{self.stored.index(column)}"


def plan_slots(
    snapshot_columns: Sequence[str], keys: Sequence[str], columns: Sequence[str],
    where: str | None,
) -> ScopeSlots:
    """The slots of a scope over a snapshot: ``columns`` already resolved to the snapshot's
    spelling; the predicate's columns found among the snapshot's (case-blind)."""
    names = {c.lower(): c for c in snapshot_columns}
    read = tuple(dict.fromkeys(names[w.lower()] for w in identifiers(where or "")
                               if w.lower() in names))
    key_set = {k.lower() for k in keys}
    stored = tuple(dict.fromkeys(c for c in (*columns, *read) if c.lower() not in key_set))
    return ScopeSlots(tuple(columns), where, read, stored)
