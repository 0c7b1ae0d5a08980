"""Parquet copies of snapshots read from a database or a DataFrame, under the table's state.

Layout: ``<state root>/<table>/snapshots/<snapshot id>/`` (a folder of Parquet part files,
readable by ``diffcdc verify --snapshot``). A copy is written under a hidden temporary name
and renamed (through Hadoop's file system: Spark's executors wrote it) when complete. Only the
copies of the last ``keep`` committed snapshots survive a run (default 0: none, deleted once
the snapshot is committed and published); anything else, such as the copy of a refused
snapshot, is removed while the table's lease is held.
"""

from __future__ import annotations

import re
import uuid

from pyspark.sql import DataFrame

from diffcdc.errors import InputRefused
from diffcdc.spark.paths import spark_path
from diffcdc.staged_files import StagedFolder
from diffcdc.storage import paths

ROW_GROUP_BYTES = 16 * 1024 * 1024
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$")


class SnapshotCopies:
    """The materialized snapshots of one table."""

    def __init__(self, state_dir: str, table: str) -> None:
        self.dir = paths.join(state_dir, "snapshots")
        self.table = table

    def path(self, snapshot_id: str) -> str:
        if not _SAFE_ID.match(snapshot_id) or ".." in snapshot_id:
            raise InputRefused(
                "snapshot id is not usable as a folder name (letters, digits and . _ : + - "
                "only, at most 200 characters)",
                table=self.table,
                snapshot=snapshot_id,
                hint="change the snapshot id query (or snapshot_id) to return such a value",
            )
        return paths.join(self.dir, snapshot_id)

    def write(self, df: DataFrame, snapshot_id: str) -> str:
        """Write ``df`` once as the copy of ``snapshot_id``; returns the copy's folder."""
        final = self.path(snapshot_id)
        spark = df.sparkSession
        snapshots = StagedFolder(spark, self.dir, table=self.table)
        tmp_name = f".tmp-{uuid.uuid4().hex}"
        snapshots.mkdirs()
        try:
            # Row groups of 16 MiB: a copy read with one database partition (one file) still
            # splits into many Spark tasks for the diff (Parquet's default is 128 MiB).
            df.write.mode("error").option("compression", "zstd").option(
                "parquet.block.size", str(ROW_GROUP_BYTES)
            ).parquet(spark_path(spark, snapshots.child(tmp_name)))
            # a copy left by a run that died before committing (we hold the lease)
            StagedFolder(spark, final, table=self.table).delete()
            # Spark's executors wrote it: renamed on the file system Spark wrote it to
            snapshots.rename_in(snapshots.child(tmp_name), snapshot_id)
        finally:
            StagedFolder(spark, snapshots.child(tmp_name), table=self.table).delete()
        return final

    def prune(self, keep: int, committed: list[str]) -> list[str]:
        """Keep the copies of the last ``keep`` committed snapshot ids; remove the rest."""
        wanted = set(committed[-keep:]) if keep > 0 else set()
        removed = []
        for name in paths.listdir(self.dir):
            if name not in wanted:
                paths.remove_tree(paths.join(self.dir, name))
                removed.append(name)
        return removed
