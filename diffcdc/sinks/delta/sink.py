"""A Delta table whose change data feed is the diff, written with delta-rs (no JVM jars).

Each committed diffcdc version with changes becomes exactly one Delta commit: a first load (or a
full image) is one write, later versions one MERGE of the change set on the key columns
(update, delete, insert), so ``load_cdf`` of that commit shows ``insert``, ``delete`` (the full
old row) and ``update_preimage``/``update_postimage`` pairs. Exactly once: every commit carries
the application transaction ``(diffcdc:<table>, <diffcdc version>)``; publishing a version the
table already records is a no-op, whatever crashed in between.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyspark.sql import SparkSession

from diffcdc import datafs
from diffcdc.core.sql import quote
from diffcdc.errors import StorageError, TargetMismatch
from diffcdc.faults import crash_point
from diffcdc.sinks.base import (
    OP,
    OP_DELETE,
    OP_INSERT,
    OP_UPDATE,
    ChangeSet,
    Replayed,
    Sink,
    SinkHistory,
    SinkTable,
)
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.delta.feed import append_changelog, plain_types

CDF = {"delta.enableChangeDataFeed": "true"}
CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


class DeltaSink(Sink):
    """The table at ``path``, mirroring the source table with exact types."""

    type = "delta"
    reserved_columns = CHANGE_COLUMNS

    def __init__(self, sink_id: str, table: SinkTable, config: DeltaSinkConfig) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.app_id = f"diffcdc:{table.schema_name + '.' if table.schema_name else ''}{table.name}"

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
        return StorageError(
            message.splitlines()[0][:300], table=self.table.name, path=path or self.config.path,
            hint="check the path and its storage options, then run again",
        )

    def check(self, history: SinkHistory) -> None:
        table = self._open()
        written = table.transaction_version(self.app_id) if table is not None else None
        if history.last is None:
            if table is not None and written is None:
                raise self._mismatch("a Delta table that diffcdc did not write is at the path",
                                     "point the sink at a new path, or remove that table")
            return
        with_rows = [v for v, m in history.manifests if m.get("rows")]
        last = history.last[0]
        if with_rows and (written is None or written < with_rows[-1]):
            raise self._mismatch(
                f"the Delta table lost commits this sink published (up to version "
                f"{with_rows[-1]}; the table records {written})",
                f"re-create it on purpose with 'diffcdc reload --table {self.table.name} --yes'",
            )
        if written is not None and written > last:
            raise self._mismatch(
                f"the Delta table records diffcdc version {written}, newer than this state's "
                f"{last}: another diffcdc state writes into it",
                "give each diffcdc state its own Delta table",
            )

    def _mismatch(self, message: str, hint: str) -> TargetMismatch:
        return TargetMismatch(message, table=self.table.name, path=self.config.path, hint=hint)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        if changes.rows:
            changes.frame.write.mode("errorifexists").parquet(os.path.join(staging_dir, "changes"))
        return {"target": self.config.path, "changelog": self.config.changelog_path,
                "recreate": changes.recreate is not None, "keys": list(changes.table.keys)}

    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory
    ) -> None:
        if not manifest.get("rows"):
            return  # a version without changes makes no Delta commit
        table = self._open()
        if table is None or (table.transaction_version(self.app_id) or 0) < version:
            self._commit(table, version, manifest, os.path.join(staging_dir, "changes"))
            crash_point("delta_committed", scope=self.id)
        if self.config.changelog_path:
            self._changelog(version)

    def _commit(
        self, table: DeltaTable | None, version: int, manifest: dict[str, Any], staged: str
    ) -> None:
        props = CommitProperties(
            custom_metadata={"diffcdc.table": self.table.name, "diffcdc.version": str(version),
                             "diffcdc.snapshot_id": str(manifest.get("snapshot_id", ""))},
            app_transactions=[Transaction(self.app_id, version)],
        )
        filesystem, path = datafs.arrow_source(staged)
        data = ds.dataset(path, filesystem=filesystem, format="parquet").to_table()
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
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise self._error(f"Delta commit of version {version} failed: {exc}") from None

    def _merge(
        self, table: DeltaTable, data: pa.Table, keys: list[str], props: CommitProperties
    ) -> None:
        columns = [c for c in data.column_names if c != OP]
        gone = [f.name for f in table.schema().fields if f.name not in columns]
        values = {**{c: f"s.{quote(c)}" for c in columns}, **{c: "NULL" for c in gone}}
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
        (
            table.merge(data, predicate=on, source_alias="s", target_alias="t",
                        merge_schema=True, commit_properties=props)
            .when_matched_update(updates=values, predicate=f"s.`{OP}` = {OP_UPDATE}")
            .when_matched_delete(predicate=f"s.`{OP}` = {OP_DELETE}")
            .when_not_matched_insert(updates=values, predicate=f"s.`{OP}` = {OP_INSERT}")
            .execute()
        )

    def _changelog(self, version: int) -> None:
        table = self._open()
        assert table is not None
        app = f"{self.app_id}:changelog"
        log = self._open(self.config.changelog_path)
        if log is not None and (log.transaction_version(app) or 0) >= version:
            return
        try:
            append_changelog(table, version, self.config.changelog_path or "", app,
                             self.config.storage_options)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise self._error(f"changelog append of version {version} failed: {exc}",
                              self.config.changelog_path) from None

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        if not manifest.get("rows"):
            return True
        table = self._open()
        return table is not None and (table.transaction_version(self.app_id) or 0) >= version

    def replay(self, spark: SparkSession) -> Replayed:
        table = self._open()
        rows = plain_types(table.to_pyarrow_table()).to_pylist() if table is not None else []
        columns = [f.name for f in table.schema().fields] if table is not None else []
        return Replayed(list(self.table.keys), columns, rows,
                        units=(table.version() + 1) if table is not None else 0)
