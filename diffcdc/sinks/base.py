"""What every sink implements: stage a committed change set, publish it exactly once, replay it.

The engine computes one neutral change set per snapshot (:class:`ChangeSet`): the key columns,
every data column with its exact Spark type, and an operation column :data:`~diffcdc.core.changeset.OP` (insert,
update, delete; a key change is a delete of the old key plus an insert of the new one; delete
rows carry the key values and NULL elsewhere). Nothing of a particular output format is in it.

Per snapshot, for every sink of the table, in this order:

1. ``quick_check(history)`` — before the diff (a sink that starts afresh is not checked):
   the part of ``check`` (3.) that tells cheaply whether the target can take a version at
   all, so no work is spent on a version no sink can take (the default runs ``check``). Fails
   the sink as ``check`` does.
2. ``accept(changes)`` — once the change set is known, for every sink before any stages: can
   this target take it at all (an insert-only target handed updates or deletes)? Raises an
   :class:`~diffcdc.errors.InputRefused`; nothing is staged or committed for any sink then.
   Then ``stage(changes, staging_dir, history)`` — write everything the sink will publish under
   ``staging_dir`` (a folder inside the uncommitted state version, private to this sink) and
   return its *manifest*: a small JSON-able dict that the commit record keeps for this sink
   (file names and checksums, message counts, ...). Staging must not touch the target.
3. ``check(history)`` — in full, once per version, right before the commit (a target changed
   while the version was staged is refused before anything of it is committed): is the
   target where this sink left it?
   (a foreign file, a lost table, a changed schema, a server that is down). Raises a
   :class:`~diffcdc.errors.DiffcdcError`: this sink fails for the run, publishes nothing and
   is named in the run's error; the version is still committed (and staged for it) when
   another sink of the table can take it, and nothing is committed when none can.
4. the engine commits (compare-and-swap): from now on the batch is frozen;
5. ``publish(version, manifest, staging_dir, history, checked=...)`` — make the staged batch
   visible in the target, idempotently: a rerun after a crash at any point publishes only what
   is missing and never anything twice. It checks the target first, right before writing, as
   ``check`` does for the versions before it (a version may be published runs after it was
   staged; and even in the run that committed it, the state's hashing and the other sinks'
   publishing came after the check before the commit). ``checked``: that check ran for this
   version in this run, so what costs time and protects nothing new (a listing of every file
   of a Delta table) may be left out; what another writer can have changed since is checked
   again. The engine records "published"
   per sink afterwards; a sink whose publish failed publishes its versions in order, oldest
   first, in a later run, while the table's other sinks go on.

An exception other than a :class:`~diffcdc.errors.DiffcdcError` (an ``OSError`` of the target's
disk: read-only, full, no permission; a library's error) at ``prepare``, ``quick_check``,
``check``, ``accept`` or ``publish`` is this sink's failure all the same: the engine names the
sink and its target (:mod:`diffcdc.engine.sink_errors`) and the table's other sinks go on. At ``stage`` (which
writes to the state's version folder) any failure stops the version for every sink.

``history`` is this sink's manifests of earlier versions, oldest first, since the table was
last re-created or the sink last got a full image (:class:`SinkHistory`; at ``check`` all of
them are published). A sink with no history on a table that already has
commits was added later: the engine hands it a full image (``changes.initial``).
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from diffcdc.core.compare import Replayed
from diffcdc.sinks.table import SinkTable
from diffcdc.spark.paths import spark_path


@dataclass(frozen=True)
class ChangeSet:
    """One snapshot's neutral change set, frozen by the commit of ``version``.

    ``frame`` holds every column of ``schema`` (the snapshot's columns, in their order, with
    their exact types) plus :data:`~diffcdc.core.changeset.OP`. Rows are in no particular order; a key occurs at most
    once. Delete rows carry the key values and NULL in every other column. With ``initial``
    every row is an insert and the sink starts from nothing (first load, a re-created table,
    or a sink added to a table with history).
    """

    table: SinkTable
    version: int
    snapshot_id: str
    schema: T.StructType
    frame: DataFrame
    initial: bool
    inserted: int
    updated: int
    deleted: int
    #: Why the table is re-created with this version (sinks drop/overwrite their old output
    #: first); None when the table continues.
    recreate: str | None = None
    #: The snapshot's as-of time, UTC (None: its source gave none).
    snapshot_time: dt.datetime | None = None
    #: The change set comes from a small table's diff made in one task (see
    #: :data:`~diffcdc.engine.state_write.ONE_TASK_BYTES`): a sink that needs it in one partition
    #: merges its partitions where they are (``coalesce(1)``) instead of shuffling it.
    one_task: bool = False

    @property
    def rows(self) -> int:
        return self.inserted + self.updated + self.deleted

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    def write_staged(self, staging_dir: str) -> None:
        """The change rows as Parquet in the version's staging folder (``<dir>/changes``), for
        a sink that publishes them after the commit."""
        self.frame.write.mode("error").parquet(
            spark_path(self.frame.sparkSession, os.path.join(staging_dir, "changes")))


@dataclass(frozen=True)
class SinkHistory:
    """This sink's manifests of earlier committed versions, oldest first."""

    manifests: Sequence[tuple[int, dict[str, Any]]] = field(default_factory=tuple)

    @property
    def last(self) -> tuple[int, dict[str, Any]] | None:
        return self.manifests[-1] if self.manifests else None

    def incarnation(self, changes: ChangeSet) -> str:
        """The incarnation of the sink's output ``changes`` go to: a new one with a full image
        (or the sink's first version), else the one its last version recorded."""
        if changes.initial or self.last is None:
            return uuid.uuid4().hex[:16]
        return self.last[1].get("incarnation")


class Sink(ABC):
    """One output of a table. Subclasses set ``type`` and take their config model."""

    type: ClassVar[str]
    #: Column names this sink adds to what it publishes; a snapshot may not use them.
    reserved_columns: tuple[str, ...] = ()
    #: True when the sink publishes each version's as-of time (a history): a snapshot older
    #: than the last committed one is then refused.
    needs_snapshot_time: bool = False

    def __init__(self, sink_id: str, table: SinkTable) -> None:
        self.id = sink_id
        self.table = table

    def reload_command(self) -> str:
        """The command that publishes a full image to this sink alone (a refused target's
        recovery; the table's other sinks go on with the diff)."""
        schema = f" --schema {self.table.schema_name}" if self.table.schema_name else ""
        return f"diffcdc reload --table {self.table.name}{schema} --sink {self.id} --yes"

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """``{"type": ..., "target": ...}`` and anything useful for ``status``; no secrets."""

    def prepare(self, scratch_dir: str) -> None:  # noqa: B027 - optional
        """Start of a run, under the table's lock (e.g. remove our own temporary uploads)."""

    def check(self, history: SinkHistory) -> None:  # noqa: B027 - most sinks check something
        """Refuse (raise) before the commit when the target is not where this sink left it."""

    def quick_check(self, history: SinkHistory) -> None:
        """Before the diff: refuse (raise) a target that cannot take a version at all; what
        costs time (a listing of every file) may wait for :meth:`check` before the commit."""
        self.check(history)

    def schema_problem(self, schema: T.StructType, history: SinkHistory) -> str | None:
        """A schema change this sink cannot follow (beyond the table's own rules), or None.

        The engine applies the table's ``schema_policy`` to it (refuse, or re-create).
        """
        return None

    def accept(self, changes: ChangeSet) -> None:  # noqa: B027 - most sinks take any change set
        """Refuse (raise ``InputRefused``) a change set this target cannot take; decide from its
        counts and schema, not by scanning rows. Called for every sink before any stages."""

    @abstractmethod
    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        """Write what will be published under ``staging_dir``; return the manifest."""

    @abstractmethod
    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory,
        *, checked: bool = False,
    ) -> None:
        """Make a committed, staged version visible in the target, idempotently.

        ``history`` holds this sink's manifests up to and including ``version``; ``checked``:
        :meth:`check` passed for it before its commit in this run (a costly part of the check,
        such as listing every file, may be left out; the rest runs again).
        """

    @abstractmethod
    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        """Whether the target already holds all of ``version`` (for resuming)."""

    @abstractmethod
    def replay(self, spark: SparkSession) -> Replayed:
        """The target's published output applied from nothing (for ``verify``)."""

    def comparable(self, snapshot: DataFrame) -> DataFrame:
        """A snapshot in the form this sink publishes it (e.g. nested columns as JSON)."""
        return snapshot

    def close(self) -> None:  # noqa: B027 - only sinks holding connections need it
        """Release connections; called once the run is done with the sink."""
