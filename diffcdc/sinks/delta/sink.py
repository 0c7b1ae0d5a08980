"""A Delta table whose change data feed is the diff, written with delta-rs (no JVM jars).

Each committed diffcdc version with changes becomes exactly one Delta commit: a first load (or a
full image) is one write, later versions one MERGE of the change set on the key columns
(update, delete, insert), so ``load_cdf`` of that commit shows ``insert``, ``delete`` (the full
old row) and ``update_preimage``/``update_postimage`` pairs. Exactly once: every commit carries
the application transaction ``(diffcdc:<table>, <diffcdc version>)``; publishing a version the
table already records is a no-op, whatever crashed in between. The application id carries
the sink's *incarnation* (a new one each time the sink starts from a full image), so a table
re-created from scratch (``diffcdc drop``, a new state) never inherits an old version number.

Before each version the sink checks that the table is where it left it: the newest commit
that changes data is its own last one (a foreign write, delete, ``RESTORE`` or schema change
is refused), the table still exists once it published rows, and its change data feed is on.
A refused target is recovered with ``diffcdc reload --table T --sink NAME``.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyspark.sql import SparkSession

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.compare import Replayed
from diffcdc.core.sql import quote
from diffcdc.errors import StorageError, TargetMismatch
from diffcdc.faults import crash_point
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.delta.feed import append_changelog, plain_types
from diffcdc.spark import spark_path
from diffcdc.storage import paths

CDF = {"delta.enableChangeDataFeed": "true"}
CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
#: Columns of the changelog table that tell diffcdc's versions and the table's incarnations
#: apart (a re-created Delta table restarts ``_commit_version`` at 0).
CHANGELOG_COLUMNS = ("_diffcdc_version", "_diffcdc_incarnation")
#: Commits of table maintenance that change no data (another engine's OPTIMIZE or VACUUM).
MAINTENANCE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})


class DeltaSink(Sink):
    """The table at ``path``, mirroring the source table with exact types."""

    type = "delta"
    reserved_columns = CHANGE_COLUMNS + CHANGELOG_COLUMNS

    def __init__(self, sink_id: str, table: SinkTable, config: DeltaSinkConfig) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.base_app_id = (
            f"diffcdc:{table.schema_name + '.' if table.schema_name else ''}{table.name}"
        )

    def app_id(self, manifest: dict[str, Any] | None) -> str:
        """The application-transaction id of a version: the table and the sink's incarnation
        (manifests written before incarnations have none: the plain table id)."""
        incarnation = (manifest or {}).get("incarnation")
        return f"{self.base_app_id}:{incarnation}" if incarnation else self.base_app_id

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "target": self.config.path,
                "changelog": self.config.changelog_path}

    def _open(self, path: str | None = None) -> DeltaTable | None:
        try:
            return DeltaTable(path or self.config.path, storage_options=self.config.storage_options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise self._error(f"cannot open the Delta table: {exc}", path) from None

    def _error(self, message: str, path: str | None = None) -> StorageError:
        text = " ".join(message.split())
        damaged = any(w in text for w in ("not found", "No such file", "missing file"))
        return StorageError(
            text[:1000], table=self.table.name, path=path or self.config.path,
            hint=(f"the table lost files diffcdc wrote: replace it with a full image with "
                  f"'{self.reload_command()}'" if damaged
                  else "check the path and its storage options, then run again"),
        )

    def check(self, history: SinkHistory) -> None:
        self._verify(list(history.manifests))

    def _verify(self, published: list[tuple[int, dict[str, Any]]]) -> DeltaTable | None:
        """Refuse a table that is not where this sink left it after ``published`` (its
        versions before the one at hand, all published); return the table (None: none yet)."""
        table = self._open()
        with_rows = [(v, m) for v, m in published if m.get("rows")]
        if not with_rows:
            if table is not None:
                raise self._mismatch(
                    "a Delta table that this diffcdc table did not publish to is at the path",
                    "point the sink at a new path or remove that table, or replace it with a "
                    f"full image: '{self.reload_command()}'",
                )
            return None
        version, manifest = with_rows[-1]
        if table is None:
            raise self._mismatch(
                f"the Delta table is gone (it held diffcdc version {version})",
                f"publish a full image to it again: '{self.reload_command()}'",
            )
        config = table.metadata().configuration
        if str(config.get("delta.enableChangeDataFeed", "")).lower() != "true":
            raise self._mismatch(
                "the Delta table's change data feed was turned off "
                "(delta.enableChangeDataFeed is not true)",
                "turn it on again and publish a full image: "
                f"'{self.reload_command()}'",
            )
        foreign = self._foreign_commit(table, version, manifest)
        if foreign is not None:
            raise self._mismatch(
                f"the Delta table was changed by another writer: its commit {foreign} came "
                f"after diffcdc version {version}",
                f"stop that writer, then replace the table with a full image: "
                f"'{self.reload_command()}'",
            )
        # Data files the log names but the store lost (deleted by hand, a bad clean-up): a
        # MERGE could then miss rows it must update. One listing (delta-rs FSCK, dry run).
        try:
            lost = list(table.repair(dry_run=True).get("files_removed") or [])
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too
            raise self._error(f"cannot list the Delta table's files: {exc}") from None
        if lost:
            raise self._mismatch(
                f"the Delta table lost {len(lost)} data file(s) its log names (e.g. {lost[0]})",
                f"replace the table with a full image: '{self.reload_command()}'",
            )
        return table

    def _foreign_commit(self, table: DeltaTable, version: int, manifest: dict[str, Any]
                        ) -> str | None:
        """The newest commit that changes data, described, when it is not this sink's commit
        of ``version`` (maintenance such as OPTIMIZE or VACUUM is skipped); None when it is."""
        app = self.app_id(manifest)
        for entry in table.history(limit=100):
            operation = str(entry.get("operation", ""))
            if operation in MAINTENANCE:
                continue
            ours = (str(entry.get("diffcdc.version")) == str(version)
                    and entry.get("diffcdc.incarnation") == manifest.get("incarnation")
                    and entry.get("diffcdc.table") in (None, self.table.name))
            if ours:
                return None
            return f"{entry.get('version')} ({operation or 'unknown operation'})"
        # Only maintenance in the newest 100 commits: the application transaction decides.
        if (table.transaction_version(app) or 0) == version:
            return None
        return f"{table.version()} (not diffcdc's)"

    def _mismatch(self, message: str, hint: str) -> TargetMismatch:
        return TargetMismatch(message, table=self.table.name, path=self.config.path, hint=hint)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        if changes.rows:
            frame = changes.frame
            frame.write.mode("error").parquet(
                spark_path(frame.sparkSession, os.path.join(staging_dir, "changes")))
        if changes.initial or history.last is None:
            incarnation = uuid.uuid4().hex[:16]
        else:
            incarnation = history.last[1].get("incarnation")
        return {"target": self.config.path, "changelog": self.config.changelog_path,
                "recreate": changes.recreate is not None, "keys": list(changes.table.keys),
                "incarnation": incarnation}

    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory
    ) -> None:
        if not manifest.get("rows"):
            return  # a version without changes makes no Delta commit
        table = self._open()
        if table is None or (table.transaction_version(self.app_id(manifest)) or 0) < version:
            if not manifest.get("initial"):
                table = self._verify([(v, m) for v, m in history.manifests if v < version])
            self._commit(table, version, manifest, os.path.join(staging_dir, "changes"))
            crash_point("delta_committed", scope=self.id)
        if self.config.changelog_path:
            self._changelog(version, manifest, os.path.join(staging_dir, "changes"))

    def _commit(
        self, table: DeltaTable | None, version: int, manifest: dict[str, Any], staged: str
    ) -> None:
        metadata = {"diffcdc.table": self.table.name, "diffcdc.version": str(version),
                    "diffcdc.snapshot_id": str(manifest.get("snapshot_id", ""))}
        if manifest.get("incarnation"):
            metadata["diffcdc.incarnation"] = str(manifest["incarnation"])
        props = CommitProperties(
            custom_metadata=metadata,
            app_transactions=[Transaction(self.app_id(manifest), version)],
        )
        data = self._staged(staged)
        try:
            if manifest.get("initial") or table is None:
                write_deltalake(
                    self.config.path, data.drop_columns([OP]),
                    mode="overwrite" if table is not None else "error",
                    schema_mode="overwrite" if table is not None else None,
                    configuration=CDF, storage_options=self.config.storage_options,
                    commit_properties=props,
                )
                return
            self._merge(table, data, manifest["keys"], props)
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too (C Data)
            # delta-rs reports a data file missing under the table as a bare Exception from
            # Arrow's C Data interface: every failure of the commit is this sink's, in one line.
            raise self._error(f"Delta commit of version {version} failed: {exc}") from None
    @staticmethod
    def _staged(staged: str) -> pa.Table:
        """The change set a version staged for this sink."""
        filesystem, path = paths.arrow_source(staged)
        return ds.dataset(path, filesystem=filesystem, format="parquet").to_table()

    def _merge(
        self, table: DeltaTable, data: pa.Table, keys: list[str], props: CommitProperties
    ) -> None:
        columns = [c for c in data.column_names if c != OP]
        target = pa.schema(table.schema().to_arrow())
        # A column the snapshots no longer have (removed_columns = "null") becomes NULL in the
        # rows written: the source frame carries it as a typed NULL column (delta-rs resolves
        # no bare NULL against a target column).
        for name in (n for n in target.names if n not in columns):
            data = data.append_column(target.field(name), pa.nulls(data.num_rows, target.field(name).type))
            columns.append(name)
        values = {c: f"s.{quote(c)}" for c in columns}
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
        (
            table.merge(data, predicate=on, source_alias="s", target_alias="t",
                        merge_schema=True, commit_properties=props)
            .when_matched_update(updates=values, predicate=f"s.`{OP}` = {OP_UPDATE}")
            .when_matched_delete(predicate=f"s.`{OP}` = {OP_DELETE}")
            .when_not_matched_insert(updates=values, predicate=f"s.`{OP}` = {OP_INSERT}")
            .execute()
        )

    def _changelog(self, version: int, manifest: dict[str, Any], staged: str) -> None:
        table = self._open()
        assert table is not None
        app = f"{self.app_id(manifest)}:changelog"
        log = self._open(self.config.changelog_path)
        if log is not None and (log.transaction_version(app) or 0) >= version:
            return
        try:
            image = self._staged(staged).drop_columns([OP]) if manifest.get("initial") else None
            append_changelog(table, version, self.config.changelog_path or "", app,
                             self.config.storage_options,
                             incarnation=str(manifest.get("incarnation") or ""), image=image)
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too
            raise self._error(f"changelog append of version {version} failed: {exc}",
                              self.config.changelog_path) from None

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        if not manifest.get("rows"):
            return True
        table = self._open()
        return table is not None and (
            table.transaction_version(self.app_id(manifest)) or 0) >= version

    def replay(self, spark: SparkSession) -> Replayed:
        table = self._open()
        rows = plain_types(table.to_pyarrow_table()).to_pylist() if table is not None else []
        columns = [f.name for f in table.schema().fields] if table is not None else []
        return Replayed(list(self.table.keys), columns, rows,
                        units=(table.version() + 1) if table is not None else 0)
