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

_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_IDENT = re.compile(r"`((?:[^`]|``)+)`|([A-Za-z_][A-Za-z0-9_]*)")


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
        return value

    @model_validator(mode="after")
    def _something(self) -> ScopeConfig:
        if not self.columns and self.where is None:
            raise ValueError("a scope needs columns, a where predicate, or both")
        return self


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
    for match in _IDENT.finditer(_STRING.sub(" ", predicate.replace(SNAPSHOT_TIME, " "))):
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
