"""A snapshot's as-of time: the moment the source showed what the snapshot holds.

Every commit records it (``snapshot_time``); a history sink takes its validity times from it,
never from the time of the run that processed the snapshot. Where it comes from:

* a JDBC read: the read's start (UTC);
* a DataFrame: ``run_dataframe(snapshot_time=...)``, else the moment it is handed over;
* a folder's snapshot: the table's ``snapshot_time`` rule — ``"mtime"`` (the default: the
  newest modification time of the snapshot's files) or ``"id:<format>"``, the snapshot id
  parsed with a ``strptime`` format (``"id:%Y-%m-%d"`` reads ``2026-11-24.parquet``; a time
  without a zone is UTC).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from diffcdc.errors import InputRefused
from diffcdc.sources.identity import FileIdentity

MTIME = "mtime"
ID_PREFIX = "id:"
_PROBE = dt.datetime(2001, 2, 3, 4, 5, 6, 789000)


@dataclass(frozen=True)
class SnapshotTimeRule:
    """How a folder snapshot's as-of time is found: ``mtime``, or the id parsed by ``format``."""

    format: str | None = None  #: None: the files' newest modification time

    @classmethod
    def parse(cls, text: str) -> SnapshotTimeRule:
        """The rule ``text`` names; ValueError (the config's message) when it names none."""
        if text == MTIME:
            return cls()
        if text.startswith(ID_PREFIX):
            fmt = text[len(ID_PREFIX):]
            if "%" not in fmt:
                raise ValueError(f"{text!r}: the format after 'id:' has no strptime directive "
                                 "(e.g. 'id:%Y-%m-%d')")
            try:
                dt.datetime.strptime(_PROBE.strftime(fmt), fmt)
            except ValueError as exc:
                raise ValueError(f"{text!r} is not a strptime format: {exc}") from None
            return cls(fmt)
        raise ValueError(f"{text!r} is not a snapshot time rule: use \"mtime\" or "
                         "\"id:<strptime format>\" (e.g. \"id:%Y-%m-%d\")")

    def time_of(self, snapshot_id: str, identity: Sequence[FileIdentity], *, table: str,
                path: str) -> dt.datetime:
        """The as-of time of the folder snapshot ``snapshot_id`` whose files are ``identity``."""
        if self.format is None:
            if not identity:
                raise InputRefused("the snapshot has no files to take its modification time from",
                                   table=table, snapshot=snapshot_id, path=path,
                                   hint="set the table's snapshot_time to \"id:<format>\"")
            newest = max(f.mtime_ns for f in identity)
            return dt.datetime.fromtimestamp(newest / 1e9, dt.timezone.utc)
        parsed = parse_id(snapshot_id, self.format)
        if parsed is None:
            raise InputRefused(
                f"the snapshot id does not match the snapshot_time format {self.format!r}",
                table=table, snapshot=snapshot_id, path=path,
                hint="rename the snapshot to match the format, or fix the table's snapshot_time",
            )
        return parsed


def parse_id(snapshot_id: str, fmt: str) -> dt.datetime | None:
    """``snapshot_id`` parsed with ``fmt`` (UTC unless it names a zone); its file extensions
    may be left off the format (``2026-11-24.csv.gz`` matches ``%Y-%m-%d``). None: no match."""
    text = snapshot_id
    while True:
        try:
            return as_utc(dt.datetime.strptime(text, fmt))
        except ValueError:
            pass
        stem, dot, _ = text.rpartition(".")
        if not dot or not stem:
            return None
        text = stem


def as_utc(value: dt.datetime) -> dt.datetime:
    """``value`` in UTC; a time without a zone is taken as UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def format_time(value: dt.datetime) -> str:
    """The recorded form: ISO 8601 in UTC with microseconds, ``2026-11-24T07:35:00.000000Z``.
    The year has four digits before the year 1000 too (``strftime("%Y")`` writes ``500``,
    which ``fromisoformat`` cannot read back)."""
    utc = as_utc(value)
    return f"{utc.year:04d}-" + utc.strftime("%m-%dT%H:%M:%S.%fZ")


def read_time(text: str) -> dt.datetime:
    """A recorded time (:func:`format_time`) as an aware datetime; a year of fewer than four
    digits (recorded so before the year was padded) is read too."""
    year, _, rest = text.partition("-")
    if year.isdigit() and len(year) < 4 and rest:
        text = f"{int(year):04d}-{rest}"
    return as_utc(dt.datetime.fromisoformat(text))
