"""Staging of Open Mirroring data files: a change set written by Spark as final-named files.

:func:`stage_parquet_files` writes the ordered change set as part files, converts them to
delimited text when the table asks for it, and renames them to their sequence names
(:func:`~diffcdc.sinks.openmirroring.contract.data_file_name`); the result is one
:class:`StagedFile` per file, ready to publish. The per-file work runs on the executors.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from diffcdc.sinks.openmirroring.contract import data_file_name
from diffcdc.sinks.openmirroring.landing import file_sha256
from diffcdc.sinks.openmirroring.text import TextFormat
from diffcdc.sinks.openmirroring.text_encode import write_text_file
from diffcdc.spark.paths import spark_path
from diffcdc.staged_files import StagedFolder, on_executors
from diffcdc.storage import paths

_PART_RE = re.compile(r"^part-(\d+)-.*?-c(\d+)(\..*)?$")


@dataclass(frozen=True)
class StagedFile:
    """A final-named data file in the staging area, ready to publish."""

    name: str
    sequence: int
    rows: int
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sequence": self.sequence,
            "rows": self.rows,
            "bytes": self.size,
            "sha256": self.sha256,
        }


def stage_parquet_files(
    changes: DataFrame,
    raw_dir: str,
    out_dir: str,
    *,
    codec: str,
    max_rows_per_file: int,
    first_sequence: int,
    text: TextFormat | None = None,
    table: str = "",
) -> list[StagedFile]:
    """Write an ordered change set with Spark and give the files their sequence names.

    Spark writes the (globally sorted) DataFrame as part files; their order (task number, then
    file counter) is the row order. The part files are found and renamed on the file system
    Spark wrote them to (:mod:`diffcdc.staged_files`); their rows, size and SHA-256 are read by executors, one
    task per file. Empty part files are dropped: the landing zone must never see an empty
    file. With ``text``, every Parquet part becomes one delimited text file (written
    deterministically by :mod:`diffcdc.sinks.openmirroring.text`, compressed with ``codec``), on
    the executors too.
    """
    part_codec = "snappy" if text is not None else codec
    spark = changes.sparkSession
    (
        changes.write.mode("error")
        .option("compression", "uncompressed" if part_codec == "none" else part_codec)
        .option("maxRecordsPerFile", max_rows_per_file)
        .parquet(spark_path(spark, raw_dir))
    )
    raw = StagedFolder(spark, raw_dir, table=table)
    parts = []
    for part in raw.files():
        match = _PART_RE.match(part.name)
        if match and part.name.endswith(".parquet"):
            parts.append(((int(match.group(1)), int(match.group(2))), part))
    parts.sort(key=lambda p: p[0])
    tasks = [(index, part.path) for index, (_, part) in enumerate(parts)]
    size = sum(part.size for _, part in parts)
    facts = sorted(on_executors(spark, tasks, _part_facts(text, codec), input_bytes=size))
    out = StagedFolder(spark, out_dir, table=table)
    out.mkdirs()
    staged = []
    sequence = first_sequence
    for index, rows, size, sha256 in facts:
        if rows == 0:
            continue
        final = data_file_name(sequence, text.extension if text else "parquet")
        name = parts[index][1].name
        out.rename_in(raw.child(name + _TEXT_SUFFIX if text else name), final)
        staged.append(StagedFile(final, sequence, rows, size, sha256))
        sequence += 1
    return staged


#: Suffix of the text file an executor writes beside the Parquet part it converted.
_TEXT_SUFFIX = ".text"


def _part_facts(
    text: TextFormat | None, codec: str
) -> Callable[[Iterator[tuple[int, str]]], Iterator[tuple[int, int, int, str]]]:
    """Executor work: (index, part path) → (index, rows, bytes, sha256) of the file to publish."""

    def facts(parts: Iterator[tuple[int, str]]) -> Iterator[tuple[int, int, int, str]]:
        for index, path in parts:
            with paths.open_read(path) as handle:
                rows = pq.ParquetFile(handle).metadata.num_rows
            if rows == 0:
                yield index, 0, 0, ""
                continue
            target = path
            if text is not None:
                # written beside, then renamed by this task: two attempts of one task (a retry,
                # speculation) never leave a half-written file under the name the driver renames
                target = path + _TEXT_SUFFIX
                attempt = f"{target}.{uuid.uuid4().hex}"
                write_text_file(path, attempt, text, codec)
                paths.move(attempt, target)
            yield index, rows, paths.size(target), file_sha256(target)

    return facts

