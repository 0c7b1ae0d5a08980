"""Where snapshots come from: one interface over a folder, a database and a DataFrame.

A source lists the snapshots waiting to be processed (oldest first) and reads one of them
into a DataFrame with its snapshot id. A folder's snapshots are files that stay put, read in
place; a database query or a DataFrame can change between two evaluations while the engine
reads a snapshot several times (fingerprints, changed rows, quality checks), so such a source
is read ONCE into a Parquet copy under the table's state folder and the diff runs on that
copy (:mod:`diffcdc.sources.copies`).
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from diffcdc.errors import LateSnapshotError, SourceError
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.identity import FileIdentity, identity_record


@dataclass(frozen=True)
class PendingSnapshot:
    """A snapshot waiting to be read.

    ``snapshot_id`` is None when the id is only known once it is read (a database read is
    identified by its start time or a query run inside the read).
    """

    snapshot_id: str | None
    path: str  #: a file path, or a description of the source (never a secret)


@dataclass
class Snapshot:
    """One snapshot, read: its id, where it came from, and its rows."""

    snapshot_id: str
    path: str  #: recorded as the commit's ``snapshot_path``
    df: DataFrame
    #: True when the snapshot changed after it was read (files only; a copy cannot change).
    changed: Callable[[], bool] = field(default=lambda: False)
    #: The files' identity when read (recorded in the commit; None: not a file snapshot).
    identity: tuple[FileIdentity, ...] | None = None
    #: The snapshot's as-of time, UTC (see :mod:`diffcdc.sources.snapshot_time`).
    time: dt.datetime | None = None

    @property
    def identity_record(self) -> tuple[dict[str, Any], ...] | None:
        """The identity as the commit records it (JSON; None: not a file snapshot)."""
        return identity_record(self.identity) if self.identity is not None else None


class Source(ABC):
    """A table's snapshots: the pending ones, and reading one of them."""

    #: True when the snapshot is materialized into a copy (then kept per ``keep_snapshots``).
    materialized = False

    @abstractmethod
    def pending(self, committed: Sequence[str]) -> list[PendingSnapshot]:
        """Snapshots newer than the last committed one, oldest first (late ones refused);
        ``committed``: the snapshot ids of the table's commits, in commit order."""

    def again(self, snapshot_id: str) -> PendingSnapshot | None:
        """The committed snapshot ``snapshot_id`` once more (a reload), if it can be read."""
        return None

    def proven(self, pending: PendingSnapshot, recorded: Sequence[Mapping[str, Any]] | None) -> bool:
        """Whether ``pending`` (from :meth:`again`) is still the snapshot a commit recorded the
        identity ``recorded`` of (False: it cannot be proven). Asked of a source whose plug-in
        declares ``reads_again``."""
        return False

    def read_again(self, spark: SparkSession, pending: PendingSnapshot) -> DataFrame:
        """The rows of a committed snapshot (from :meth:`again`, :meth:`proven`) once more, read
        as the run read them. Asked of a source whose plug-in declares ``reads_again``."""
        raise SourceError(f"the snapshots of {self.describe()} cannot be read again",
                          snapshot=pending.snapshot_id,
                          hint="re-create the table from a snapshot you have (diffcdc reload)")

    @abstractmethod
    def read(
        self, spark: SparkSession, pending: PendingSnapshot, copies: SnapshotCopies,
        after: str | None,
    ) -> Snapshot | None:
        """Read one pending snapshot; None when it turns out to be no newer than ``after``."""

    @abstractmethod
    def describe(self) -> str:
        """Where the snapshots come from, for messages (never a secret)."""


def check_order(snapshot_id: str, after: str | None, table: str, path: str) -> bool:
    """True when ``snapshot_id`` is new; False when it is the last committed one again.

    An id that sorts before the last committed one is refused (late snapshot), as for files.
    """
    if after is None or snapshot_id > after:
        return True
    if snapshot_id == after:
        return False
    raise LateSnapshotError(
        f"snapshot id sorts before the last committed snapshot {after}",
        table=table,
        snapshot=snapshot_id,
        path=path,
        hint="snapshot ids must grow in lexical order (check the snapshot id query or the "
        "clock), or reload the table",
    )
