"""Staging a change set as message bodies: encoded per file on the executors.

Spark writes the change rows, projected to the Avro layout, as Parquet into a scratch folder
(vectorized, in the JVM). One Python task per Parquet file then reads it with pyarrow in
batches, encodes them with :func:`~diffcdc.sinks.kafka.binary.encode_batch` and writes bounded
container files (the state folder is shared by driver and executors, as for every staged
output). Rows never cross from the JVM to Python one batch at a time: measured at 1M rows in
one run, Spark's Parquet write plus pyarrow reading it back took 14.7 s against 23.3 s for
``mapInArrow`` merely delivering the same rows (on a machine loaded to 14: ratios, not
seconds). The driver collects only the file list (path, records, bytes, sha256), numbers the
parts in file order and renames them to ``part-000001.avro``... From the commit on, those
files are the frozen batch: publishing and every retry send exactly these bytes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlparse

from diffcdc.errors import StateError
from diffcdc.sinks.base import ChangeSet
from diffcdc.sinks.kafka.binary import FieldPlan, encode_batch
from diffcdc.sinks.kafka.container import MessageWriter, container_header, sync_marker
from diffcdc.sinks.kafka.errors import MessageTooLarge
from diffcdc.sinks.kafka.schema import AvroLayout, to_publish_frame
from diffcdc.spark import literal_path

SCRATCH = "_encoding"


def part_file(number: int) -> str:
    """The staged file name of part ``number`` (1-based)."""
    return f"part-{number:06d}.avro"


def _encoder(
    folder: str, header: bytes, sync: bytes, plans: list[FieldPlan], max_records: int, max_bytes: int
) -> Callable[[Iterator[tuple[int, str]]], Iterator[tuple[int, str, int, int, str]]]:
    def encode_files(files: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str, int, int, str]]:
        import pyarrow.parquet as pq

        for index, path in files:
            writer = MessageWriter(folder, header, sync, max_records, max_bytes)
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
                if batch.num_rows:
                    writer.add(*encode_batch(list(batch.columns), plans))
            writer.flush()
            for w in writer.written:
                yield index, w.path, w.records, w.bytes, w.sha256

    return encode_files


#: Rows per encoded batch (pyarrow reads a file in batches of this many rows).
BATCH_ROWS = 65_536


def _local_path(uri: str) -> str:
    """A Hadoop file URI as a local path (the staging area is on a shared file system)."""
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def stage_parts(
    changes: ChangeSet,
    layout: AvroLayout,
    staging_dir: str,
    *,
    max_records: int,
    max_bytes: int,
    sink: str,
) -> list[dict[str, Any]]:
    """Encode ``changes`` into part files under ``staging_dir``; return their manifest entries."""
    table = changes.table.name
    scratch = os.path.join(staging_dir, SCRATCH)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    sync = sync_marker(table, changes.version)
    header = container_header(layout.schema, layout.columns, sync)
    encode = _encoder(scratch, header, sync, layout.plans, max_records, max_bytes)
    frame = to_publish_frame(changes.frame, layout)
    rows_dir = os.path.join(scratch, "rows")
    frame.write.mode("errorifexists").option("compression", "none").parquet(rows_dir)
    files = sorted(_local_path(f) for f in frame.sparkSession.read.parquet(literal_path(rows_dir)).inputFiles())
    spark = frame.sparkSession.sparkContext
    done = spark.parallelize(list(enumerate(files)), max(1, len(files))).mapPartitions(encode).collect()
    shutil.rmtree(rows_dir, ignore_errors=True)
    rows = [dict(zip(("index", "path", "records", "bytes", "sha256"), r)) for r in sorted(done, key=lambda r: (r[0], r[1]))]
    parts: list[dict[str, Any]] = []
    for number, row in enumerate(rows, start=1):
        if row["bytes"] > max_bytes:
            shutil.rmtree(scratch, ignore_errors=True)
            raise MessageTooLarge(
                f"a single record needs a {row['bytes']}-byte message, more than "
                f"max_message_bytes = {max_bytes} of sink {sink}",
                table=table,
                hint="raise max_message_bytes (and the topic's max.message.bytes on the broker)",
            )
        if not os.path.exists(row["path"]):
            raise StateError(
                f"encoded message {row['path']} is not visible to the driver",
                table=table,
                hint="the state folder must be on a file system shared by the Spark driver "
                "and executors",
            )
        name = part_file(number)
        os.replace(row["path"], os.path.join(staging_dir, name))
        parts.append({"file": name, "records": row["records"], "bytes": row["bytes"], "sha256": row["sha256"]})
    shutil.rmtree(scratch, ignore_errors=True)  # and any file of a failed task attempt
    total = sum(p["records"] for p in parts)
    if total != changes.rows:
        raise StateError(
            f"encoded {total} records for sink {sink}, the change set has {changes.rows}",
            table=table,
            hint="internal error: nothing was committed; please report it",
        )
    return parts
