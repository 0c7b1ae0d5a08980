"""State files are checked, not trusted: a manifest per version and the checks that use it.

A committed version lists every Parquet file of its state with size, row count (from the
file's footer) and an XXH3-128 checksum of its bytes. Before a run diffs against the head
state it makes the cheap check (:func:`quick_check`: every listed file present with its size
and footer row count, no unlisted part file); ``diffcdc verify --state`` makes the full one
(:func:`full_check`, checksums too). Either refuses a damaged state with one line naming the
file and the way out, so a lost or emptied part file can never turn into re-inserted or
never-deleted keys downstream.

Versions committed before manifests existed carry none: for them the quick check still
refuses a missing folder, an empty folder and unreadable footers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import xxhash

from diffcdc.storage import paths

if TYPE_CHECKING:  # reading state stays light (status, plan): no Spark import
    from pyspark.sql import SparkSession

    from diffcdc.staged_files import StagedFile

_CHUNK = 4 << 20


@dataclass(frozen=True)
class StateFile:
    """One Parquet file of a state version."""

    name: str  #: relative to the version's state folder
    bytes: int
    rows: int
    xxh3_128: str


@dataclass(frozen=True)
class StateManifest:
    """Every file of a state version and their total row count (tombstones included)."""

    files: tuple[StateFile, ...]
    rows: int

    def to_dict(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "files": [
                {"name": f.name, "bytes": f.bytes, "rows": f.rows, "xxh3_128": f.xxh3_128}
                for f in self.files
            ],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> StateManifest:
        files = tuple(
            StateFile(str(f["name"]), int(f["bytes"]), int(f["rows"]), str(f["xxh3_128"]))
            for f in raw["files"]  # type: ignore[union-attr]
        )
        return cls(files, int(raw["rows"]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Damage:
    """What is wrong with a state version: the file (or folder) and the reason."""

    path: str
    reason: str


def checksum(path: str) -> str:
    digest = xxhash.xxh3_128()
    with paths.open_read(path) as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def footer_rows(path: str) -> int:
    """The row count in a Parquet file's footer (raises ValueError/OSError when unreadable)."""
    try:
        import pyarrow.parquet as pq  # here: reading state stays light (status, plan)

        with paths.open_read(path) as handle:
            return int(pq.read_metadata(handle).num_rows)
    except OSError:
        raise
    except Exception as exc:  # pyarrow raises ArrowInvalid (a ValueError) and others
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def describe_state(
    spark: SparkSession, folder: str, table: str, files: list[StagedFile] | None = None
) -> StateManifest:
    """The manifest of a state folder just written (footers read, bytes hashed).

    The files are listed through the byte store (or given: ``files``, the folder's data files as
    ``StagedFolder.data_files`` listed them) and read by the executors, one task per file
    (they wrote them; the driver collects only name, size, rows and checksum).
    """
    from diffcdc.staged_files import StagedFolder, on_executors

    found = files if files is not None else StagedFolder(spark, folder, table=table).data_files()
    tasks = [(f.name, f.path) for f in found]
    size = sum(f.size for f in found)
    files = sorted(on_executors(spark, tasks, _describe_files, input_bytes=size), key=lambda f: f.name)
    return StateManifest(tuple(files), sum(f.rows for f in files))


def _describe_files(files: Iterator[tuple[str, str]]) -> Iterator[StateFile]:
    """Executor work: (name, local path) → its :class:`StateFile`."""
    for name, path in files:
        yield StateFile(name, paths.size(path), footer_rows(path), checksum(path))


def find_damage(folder: str, manifest: StateManifest | None, *, checksums: bool) -> Damage | None:
    """The first problem with a state folder, or None when it is intact."""
    if not paths.isdir(folder):
        return Damage(folder, "the state folder is missing")
    present = set(paths.data_files(folder))
    if manifest is None:  # a version committed before manifests: what can still be checked
        if not present:
            return Damage(folder, "the state folder has no data files")
        for name in sorted(present):
            path = paths.join(folder, name)
            try:
                footer_rows(path)
            except (OSError, ValueError) as exc:
                return Damage(path, f"unreadable Parquet footer ({exc})")
        return None
    listed = {f.name for f in manifest.files}
    for name in sorted(present - listed):
        return Damage(paths.join(folder, name), "a file the commit does not list")
    for f in manifest.files:
        path = paths.join(folder, f.name)
        if f.name not in present:
            return Damage(path, "the file is missing")
        size = paths.size(path)
        if size != f.bytes:
            return Damage(path, f"size is {size} bytes, the commit recorded {f.bytes}")
        try:
            rows = footer_rows(path)
        except (OSError, ValueError) as exc:
            return Damage(path, f"unreadable Parquet footer ({exc})")
        if rows != f.rows:
            return Damage(path, f"holds {rows} rows, the commit recorded {f.rows}")
        if checksums and checksum(path) != f.xxh3_128:
            return Damage(path, "content differs from the commit's checksum")
    return None

