"""Staging a change set as message bodies: encoded per partition on the executors.

``mapInArrow`` hands every partition's rows to :func:`_encode_partition` as Arrow batches; it
encodes them with :func:`~diffcdc.sinks.kafka.binary.encode_batch` and writes bounded
container files into a scratch folder of the staging directory (the state folder is shared by
driver and executors, as for every staged output). The driver collects only the file list
(path, records, bytes, sha256), numbers the parts in partition order and renames the files to
``part-000001.avro``... From the commit on, those files are the frozen batch: publishing and
every retry send exactly these bytes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from diffcdc.errors import StateError
from diffcdc.sinks.base import ChangeSet
from diffcdc.sinks.kafka.binary import FieldPlan, encode_batch
from diffcdc.sinks.kafka.container import MessageWriter, container_header, sync_marker
from diffcdc.sinks.kafka.errors import MessageTooLarge
from diffcdc.sinks.kafka.schema import AvroLayout, to_publish_frame

SCRATCH = "_encoding"
_RESULT_DDL = "path string, records long, bytes long, sha256 string"
_RESULT = pa.schema(
    [("path", pa.string()), ("records", pa.int64()), ("bytes", pa.int64()), ("sha256", pa.string())]
)


def part_file(number: int) -> str:
    """The staged file name of part ``number`` (1-based)."""
    return f"part-{number:06d}.avro"


def _encoder(
    folder: str, header: bytes, sync: bytes, plans: list[FieldPlan], max_records: int, max_bytes: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def encode_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = MessageWriter(folder, header, sync, max_records, max_bytes)
        for batch in batches:
            if batch.num_rows:
                writer.add(*encode_batch(list(batch.columns), plans))
        writer.flush()
        w = writer.written
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([b.path for b in w], pa.string()),
                pa.array([b.records for b in w], pa.int64()),
                pa.array([b.bytes for b in w], pa.int64()),
                pa.array([b.sha256 for b in w], pa.string()),
            ],
            schema=_RESULT,
        )

    return encode_partition


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
    rows = frame.mapInArrow(encode, _RESULT_DDL).collect()  # partition order: stable part numbers
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
