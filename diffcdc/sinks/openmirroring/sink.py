"""The Open Mirroring landing zone as a sink (spec §1; docs/landing.md).

Staging writes final-named data files (20-digit sequence numbers, consecutive across versions)
and ``_metadata.json`` into the sink's staging folder; publishing puts them into the table
folder in sequence order under a temporary name and a no-overwrite rename. The manifest keeps
the numbers, names, sizes and SHA-256 of the files, so a rerun publishes only what is missing.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from diffcdc.core.compare import Replayed
from diffcdc.errors import StateError
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.openmirroring.config import OpenMirroringSinkConfig
from diffcdc.sinks.openmirroring.contract import check_continuation, known_files, table_folder
from diffcdc.sinks.openmirroring.landing import open_landing, remove_temp_files
from diffcdc.sinks.openmirroring.metadata import (
    check_published_metadata,
    ensure_partner_events,
    metadata_item,
)
from diffcdc.sinks.openmirroring.plan import landing_plan, text_schema_problem
from diffcdc.sinks.openmirroring.publish import Marks, publish_batch
from diffcdc.sinks.openmirroring.replay import replay
from diffcdc.sinks.openmirroring.rows import ROW_MARKER, landing_changes, to_landing_columns
from diffcdc.sinks.openmirroring.staging import stage_parquet_files
from diffcdc.staged_files import StagedFolder
from diffcdc.storage import paths
from diffcdc.storage.base import ByteStore

#: Change sets up to this many rows are sorted in one task (no range-partitioning sample pass).
SINGLE_TASK_SORT_ROWS = 1_000_000


class OpenMirroringSink(Sink):
    """A landing zone table folder: ``<landing>/[<schema>.schema/]<Table>/``."""

    type = "open_mirroring"
    reserved_columns = (ROW_MARKER,)

    def __init__(
        self,
        sink_id: str,
        table: SinkTable,
        config: OpenMirroringSinkConfig,
        marks: Marks,
        storage: ByteStore | None = None,
    ) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.marks = marks
        self.folder = table_folder(table.name, table.schema_name)
        self._storage = storage

    @property
    def storage(self) -> ByteStore:
        if self._storage is None:
            self._storage = open_landing(self.config.landing, **self.config.landing_options)
        return self._storage

    def describe(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "target": f"{self.storage.describe()}/{self.folder}",
            "format": self.config.file_format,
        }

    def prepare(self, staging_dir: str) -> None:
        """Start of a run (under the table's lock): remove our debris, place partner events."""
        remove_temp_files(self.storage, self.folder)
        if self.config.partner is not None:
            ensure_partner_events(
                self.storage, self.config.partner.document(), staging_dir, self.table.name
            )

    def check(self, history: SinkHistory) -> None:
        """A landing folder that is not where this sink left it (a foreign file, lost files, an
        edited ``_metadata.json``) is refused, naming also the recovery that leaves the table's
        other sinks alone."""
        last = history.last
        alone = self.reload_command()
        check_continuation(
            self.storage,
            self.folder,
            table=self.table.name,
            published_through=(last[1]["sequence"]["next"] - 1) if last else 0,
            known=known_files([m for _, m in history.manifests]),
            alone=alone,
        )
        if last is not None:
            check_published_metadata(self.storage, self.folder, last[1], self.table.name, alone)

    def schema_problem(self, schema: T.StructType, history: SinkHistory) -> str | None:
        last = history.last
        return text_schema_problem(self.config, schema, last[1] if last else None)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        paths.makedirs(staging_dir)
        last = None if changes.initial else history.last
        previous = last[1] if last else None
        keys = list(self.table.keys)
        plan = landing_plan(
            self.config,
            changes.frame,
            keys,
            previous,
            table=self.table.name,
            schema_name=self.table.schema_name,
            snapshot=changes.snapshot_id,
        )
        first = previous["sequence"]["next"] if previous else 1
        files = []
        if changes.rows:
            ordered = landing_changes(
                plan.frame,
                keys,
                plan.columns,
                initial=changes.initial,
                upsert=self.config.upsert_default,
                single_partition=changes.rows <= SINGLE_TASK_SORT_ROWS,
                one_task=changes.one_task,
            )
            raw = paths.join(staging_dir, "raw")
            files = stage_parquet_files(
                ordered,
                raw,
                paths.join(staging_dir, "landing"),
                codec=self.config.landing_codec,
                max_rows_per_file=self.config.max_rows_per_file,
                first_sequence=first,
                text=plan.text,
                table=self.table.name,
            )
            StagedFolder(changes.frame.sparkSession, raw, table=self.table.name).delete()
            if sum(f.rows for f in files) != changes.rows:
                raise StateError(
                    f"staged {sum(f.rows for f in files)} change rows, expected {changes.rows}",
                    table=self.table.name,
                    snapshot=changes.snapshot_id,
                    hint="internal error: nothing was published; please report it",
                )
        meta = metadata_item(staging_dir, self.folder, plan.metadata)
        return {
            "landing": self.storage.describe(),
            "landing_folder": self.folder,
            "metadata": {"target": meta.target, "sha256": meta.sha256, "bytes": meta.size},
            "metadata_document": plan.metadata,
            "landing_schema": plan.landing_schema,
            "codec": self.config.landing_codec,
            "drop_timeout": self.config.drop_timeout,
            "recreate": changes.recreate is not None,
            "files": [f.to_dict() for f in files],
            "sequence": {"first": first, "next": first + len(files)},
        }

    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory,
        *, checked: bool = False,
    ) -> None:
        """Publish a committed version; a landing folder that is not where this sink left it
        (a foreign file, lost files, another ``_metadata.json``) is refused, naming also the
        recovery that leaves the table's other sinks alone."""
        publish_batch(
            self.storage,
            self.marks,
            table=self.table.name,
            version=version,
            manifest=manifest,
            staging_dir=staging_dir,
            known=known_files([m for v, m in history.manifests if v < version]),
            keys=list(self.table.keys),
            sink_id=self.id,
            alone=self.reload_command(),
        )

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        folder = manifest["landing_folder"]
        for f in manifest["files"]:
            info = self.storage.stat(f"{folder}/{f['name']}")
            if info is None or info.size != int(f["bytes"]):
                return False
        return self.storage.stat(f"{folder}/_metadata.json") is not None

    def replay(self, spark: SparkSession) -> Replayed:
        return replay(self.storage, self.folder).replayed()

    def comparable(self, snapshot: DataFrame) -> DataFrame:
        return to_landing_columns(snapshot)

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
