"""What a history table's rows mean: its metadata column names, the open end, the tombstone
rule and the "as of" predicate. Pure (no IO, no table format): the Delta sink's history mode
(:mod:`diffcdc.sinks.delta.history`) writes by it, and any later history sink can.

A history holds every version of every row. Beside the table's own columns each row has

* ``start_at`` / ``end_at`` (bigint): the diffcdc version that opened / closed it; on the key's
  open row ``end_at`` is the open end (NULL, or the ``end_at`` sentinel);
* ``valid_from`` / ``valid_to`` (timestamp, UTC): the same as the snapshots' as-of times;
  ``valid_to`` of the open row is NULL, or the ``valid_to`` sentinel;
* ``changed_columns`` (array<string>): on a row that continues its key's previous row (an
  update), the non-key columns that differ from it; NULL on a row that opens a key and on a
  tombstone;
* with ``deletes = "row"``, ``deleted`` (boolean): false on every row the snapshots had, true
  on a *tombstone*: a delete at version V closes the key's open row at V and opens a tombstone
  at V carrying the key's last values (never NULLs in their place), open until the key comes
  back (its next row then starts where the tombstone ends).

As of version V the rows with ``start_at <= V AND (end_at IS NULL OR end_at > V)``, without the
tombstones, are exactly version V's snapshot (:meth:`HistoryLayout.as_of_sql`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: Today's (and main's earlier) metadata column names.
START_AT, END_AT = "__START_AT", "__END_AT"
VALID_FROM, VALID_TO = "__VALID_FROM", "__VALID_TO"
CHANGED_COLUMNS = "__CHANGED_COLUMNS"
#: The deleted flag's name when ``deletes = "row"`` and none is given.
DELETED = "__DELETED"
#: The largest version sentinel: the version columns are bigint.
BIGINT_MAX = 2**63 - 1
#: Names no history column may take: diffcdc's own working columns start with it.
RESERVED_PREFIX = "__diffcdc"


def parse_open_time(text: str | dt.datetime) -> dt.datetime:
    """A ``valid_to`` sentinel as a UTC time (microseconds); ValueError when it is not a
    timestamp with a time zone (``9999-12-31T00:00:00Z``)."""
    if isinstance(text, dt.datetime):
        value = text
    else:
        year, _, rest = text.strip().partition("-")
        if year.isdigit() and len(year) < 4 and rest:  # a record of a year before 1000
            text = f"{int(year):04d}-{rest}"  # written unpadded by an earlier diffcdc
        try:
            value = dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a timestamp (give e.g. "
                             "\"9999-12-31T00:00:00Z\")") from None
    if value.tzinfo is None:
        raise ValueError(f"{str(text)!r} has no time zone (give e.g. \"9999-12-31T00:00:00Z\")")
    try:
        return value.astimezone(dt.timezone.utc)
    except OverflowError:  # e.g. 9999-12-31T23:00:00-05:00: past the year 9999 in UTC
        raise ValueError(f"{str(text)!r} is outside the years 1 to 9999 in UTC (give e.g. "
                         "\"9999-12-31T00:00:00Z\")") from None


def format_open_time(value: dt.datetime) -> str:
    """A ``valid_to`` sentinel as text (UTC, ``Z``; four year digits, as ``fromisoformat``
    reads them)."""
    utc = value.astimezone(dt.timezone.utc)
    return f"{utc.year:04d}-" + utc.strftime("%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class OpenEnd:
    """What the open row holds instead of NULL (None: NULL)."""

    end_at: int | None = None
    valid_to: dt.datetime | None = None


@dataclass(frozen=True)
class HistoryLayout:
    """A history's column names, open end and delete rule: part of the history's identity
    (a history keeps the layout it was made with until it is rebuilt)."""

    start_at: str = START_AT
    end_at: str = END_AT
    valid_from: str = VALID_FROM
    valid_to: str = VALID_TO
    changed_columns: str = CHANGED_COLUMNS
    #: The deleted flag's name: deletes are tombstone rows; None: a delete only closes the row.
    deleted: str | None = None
    open_end: OpenEnd = field(default_factory=OpenEnd)

    @property
    def deletes_as_rows(self) -> bool:
        return self.deleted is not None

    @property
    def columns(self) -> tuple[str, ...]:
        """The metadata columns, in the order a history adds them."""
        names = (self.start_at, self.end_at, self.valid_from, self.valid_to,
                 self.changed_columns)
        return (*names, self.deleted) if self.deleted is not None else names

    @property
    def validity(self) -> tuple[str, str, str, str]:
        """The four columns that make a table a history."""
        return self.start_at, self.end_at, self.valid_from, self.valid_to

    def problems(self) -> list[str]:
        """What is wrong with the names and sentinels (empty: nothing)."""
        out = []
        lower = [c.lower() for c in self.columns]
        for name in self.columns:
            if not name.strip():
                out.append("a history column name is empty")
            elif name.lower().startswith(RESERVED_PREFIX):
                out.append(f"history column {name!r} starts with the reserved {RESERVED_PREFIX!r}")
        twice = sorted({c for c in self.columns if lower.count(c.lower()) > 1})
        if twice:
            out.append(f"history column names {twice} are given twice (names are compared "
                       "case-insensitively)")
        if self.open_end.end_at is not None and self.open_end.end_at <= 0:
            out.append(f"open_end.end_at {self.open_end.end_at} is no version sentinel: give a "
                       "number above every version, e.g. 9223372036854775807")
        elif self.open_end.end_at is not None and self.open_end.end_at > BIGINT_MAX:
            out.append(f"open_end.end_at {self.open_end.end_at} does not fit the bigint "
                       f"version column: give at most {BIGINT_MAX}")
        return out

    # -- the open end ---------------------------------------------------------------------
    def is_open(self, end_at: int | None) -> bool:
        """Whether a row whose ``end_at`` is this is its key's open row."""
        return end_at is None if self.open_end.end_at is None else end_at == self.open_end.end_at

    def open_sql(self, alias: str = "", quote: Any = None) -> str:
        """SQL: the row (``alias.``) is its key's open row."""
        column = f"{alias}{quote(self.end_at) if quote else self.end_at}"
        if self.open_end.end_at is None:
            return f"{column} IS NULL"
        return f"{column} = {self.open_end.end_at}"

    def as_of_sql(self, version: int, quote: Any = None) -> str:
        """SQL over the history's names: the rows of version ``version``'s snapshot. ``quote``
        (the SQL dialect's identifier quoting) is needed for any name that is no plain
        identifier: unquoted, ``valid-to`` would be read as ``valid`` minus ``to``."""
        def name(column: str) -> str:
            return quote(column) if quote else column

        start, end = name(self.start_at), name(self.end_at)
        live = f" AND NOT {name(self.deleted)}" if self.deleted is not None else ""
        return f"{start} <= {version} AND ({end} IS NULL OR {end} > {version}){live}"

    def as_of(self, row: dict[str, Any], version: int) -> bool:
        """Whether a history row (a dict by name) belongs to version ``version``'s snapshot."""
        end = row[self.end_at]
        valid = row[self.start_at] <= version and (end is None or end > version)
        return valid and not (self.deleted is not None and row[self.deleted])

    # -- identity -------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The layout as JSON-able data (recorded with the history, compared on each run)."""
        data = asdict(self)
        valid_to = self.open_end.valid_to
        data["open_end"] = {"end_at": self.open_end.end_at,
                            "valid_to": format_open_time(valid_to) if valid_to else None}
        return data

    def text(self) -> str:
        """:meth:`record` as compact JSON (a Delta field's metadata)."""
        return json.dumps(self.record(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_record(cls, data: dict[str, Any] | str | None) -> HistoryLayout:
        """A recorded layout (None: the default, as main's earlier histories have)."""
        if data is None:
            return cls()
        if isinstance(data, str):
            data = json.loads(data)
        assert isinstance(data, dict)
        end = data.get("open_end") or {}
        valid_to = end.get("valid_to")
        return cls(
            start_at=data["start_at"], end_at=data["end_at"], valid_from=data["valid_from"],
            valid_to=data["valid_to"], changed_columns=data["changed_columns"],
            deleted=data.get("deleted"),
            open_end=OpenEnd(end.get("end_at"),
                             parse_open_time(valid_to) if valid_to else None),
        )

    def describe(self) -> str:
        """The layout in words, for messages: only what differs from the default."""
        default = HistoryLayout()
        parts = [f"{role}={name!r}" for role, name in (
            ("start_at", self.start_at), ("end_at", self.end_at),
            ("valid_from", self.valid_from), ("valid_to", self.valid_to),
            ("changed_columns", self.changed_columns))
            if name != getattr(default, role)]
        parts.append(f"deletes=\"row\" (flag {self.deleted!r})" if self.deleted is not None
                     else "deletes=\"close\"")
        if self.open_end.end_at is not None:
            parts.append(f"open end_at {self.open_end.end_at}")
        if self.open_end.valid_to is not None:
            parts.append(f"open valid_to {format_open_time(self.open_end.valid_to)}")
        return ", ".join(parts)
