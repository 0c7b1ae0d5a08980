"""Files that Spark's executors wrote (state Parquet, staged output, snapshot copies), handled
through the byte store of their folder.

Spark resolves a folder's path through Hadoop's ``FileSystem`` (its default file system may
make a plain path ``hdfs://...``): :class:`StagedFolder` asks Hadoop once, through the JVM
gateway, which file system the folder is on — the one thing the store cannot know — and
refuses one diffcdc's own reads do not reach. A Spark Connect session has no gateway: there a
plain path is taken as a path this process and the server's executors share (a mount, a
Databricks volume), and a folder Spark wrote that this process cannot see is refused
(:meth:`StagedFolder.data_files`) instead of read as empty. Everything else (listing, renaming, removing)
goes through :mod:`diffcdc.storage.paths`: a local path (a folder, or a mount every node
shares) on the local backend, a ``webhdfs://`` URL on the WebHDFS backend, which is the file
system Spark wrote them to. Facts about a file that need its bytes (rows, size, SHA-256) are
computed by the executors (:func:`on_executors`); the driver collects only those small tuples.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import SparkSession

from diffcdc.errors import StateError, StorageError
from diffcdc.spark.per_session import PerSession
from diffcdc.spark.session import is_connect, on_this_machine
from diffcdc.storage import paths, registry

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class StagedFile:
    """One file of a listing: the path every node opens it by, its name, its size."""

    path: str  #: a local path or a ``webhdfs://`` URL
    name: str  #: relative to the listed folder
    size: int

    @property
    def local(self) -> str | None:
        """The path on the node's own file system, or None (a URL)."""
        return None if paths.is_url(self.path) else self.path


class StagedFolder:
    """A folder Spark writes to, at the path every node opens it by."""

    def __init__(self, spark: SparkSession, folder: str, *, table: str) -> None:
        self.table = table
        #: The folder as every node opens it: a local path or a ``webhdfs://`` URL.
        self.folder = _reachable(spark, folder, table)

    def child(self, name: str) -> str:
        """The path of ``name`` inside the folder."""
        return paths.join(self.folder, name)

    def files(self) -> list[StagedFile]:
        """The files directly in the folder, by name (none when the folder does not exist)."""
        store, inner = paths.store_of(self.folder)
        return [StagedFile(self.child(f.name), f.name, f.size) for f in store.list(inner)]

    def data_files(self) -> list[StagedFile]:
        """Every data file below the folder Spark just wrote (as a Spark-written Parquet folder
        holds them: hidden and ``_`` files and folders skipped), named relative to the folder,
        by name. A folder Spark wrote always exists, also for no rows: when it cannot be seen
        here, Spark wrote it to another file system, and reading it as empty would lose rows."""
        if not paths.isdir(self.folder):
            raise StateError(
                f"Spark wrote {self.folder} but it is not visible to diffcdc here",
                table=self.table,
                path=self.folder,
                hint="the state folder must be one this process and the Spark driver and "
                "executors share (a mount, a Unity Catalog volume, an abfss:// or webhdfs:// "
                "URL; see docs/state.md)",
            )
        return [
            StagedFile(self.child(f.name), f.name, f.size) for f in paths.data_file_infos(self.folder)
        ]

    def mkdirs(self) -> None:
        paths.makedirs(self.folder)

    def rename_in(self, source: str, name: str) -> None:
        """Move ``source`` (a file or folder of the same file system) to ``name`` in this
        folder; never over an existing one."""
        target = self.child(name)
        try:
            if paths.exists(target):
                raise FileExistsError(f"{target} exists")
            paths.move(source, target)
        except (OSError, StorageError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StateError(
                f"could not rename staged file {source} to {target} ({why})",
                table=self.table,
                path=source,
                hint="the file is not visible on the file system Spark wrote it to: the state "
                "folder must be one the Spark driver and executors share (see docs/state.md)",
            ) from None

    def delete(self) -> None:
        """Remove the folder and everything in it (no error when it does not exist)."""
        paths.remove_tree(self.folder)


def _reachable(spark: SparkSession, folder: str, table: str) -> str:
    """``folder`` as Spark's Hadoop file system resolves it, as a path every node opens (a
    local path or a URL diffcdc reads by); a one-line StateError for any other."""
    if is_connect(spark):  # no gateway to ask: the path as given (see the module docstring)
        scheme = registry.scheme(folder)
        if not scheme or scheme == "file":
            return os.path.abspath(registry.local_path(folder))
        if scheme in registry.DATA_SCHEMES:
            return folder
        qualified_text = folder
    else:
        hadoop_path = _path_class(spark)
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        qualified = hadoop_path(folder).getFileSystem(conf).makeQualified(hadoop_path(folder))
        uri = qualified.toUri()
        if uri.getScheme() in (None, "file"):
            return str(uri.getPath())
        qualified_text = str(qualified.toString())
        if str(uri.getScheme()).lower() in registry.DATA_SCHEMES:
            return qualified_text
    raise StateError(
        f"{folder} is on a file system diffcdc's own reads do not reach ({qualified_text})",
        table=table,
        path=folder,
        hint="give state_data as a local path, a mount the Spark driver and executors share, "
        f"or a {' or '.join(s + '://' for s in registry.DATA_SCHEMES)} URL (see docs/state.md)",
    )


#: Per classic session: Hadoop's ``Path`` class. Py4J finds ``jvm.org.apache.hadoop.fs.Path`` one
#: package at a time, each step a class lookup through every jar (~2 ms); the class object it
#: returns can be kept while the session lives.
_PATH_CLASSES: PerSession[Any] = PerSession()


def _path_class(spark: SparkSession) -> Any:
    jvm = spark._jvm  # type: ignore[attr-defined]
    assert jvm is not None
    return _PATH_CLASSES.get_or_make(spark, lambda: jvm.org.apache.hadoop.fs.Path)
#: Work over at most this many bytes of input files runs in the driver's own process when the
#: executors share the driver's machine (``local[...]``): a Spark job costs 60-150 ms of
#: scheduling and planning, more than reading a few small files (measured: a 20k-row table's
#: run makes two such jobs, its state manifest and its landing files' facts).
IN_PROCESS_BYTES = 8 * 1024 * 1024


def on_executors(
    spark: SparkSession,
    items: Sequence[T],
    work: Callable[[Iterator[T]], Iterator[R]],
    *,
    input_bytes: int | None = None,
) -> list[R]:
    """Run ``work`` over ``items`` in Spark tasks (one per item) and collect its small results.

    With ``input_bytes`` (the size of the files ``work`` reads) at most :data:`IN_PROCESS_BYTES`
    on a ``local[...]`` master, ``work`` runs right here instead: the same files, the same disk.
    """
    if not items:
        return []
    if input_bytes is not None and in_process(spark, input_bytes):
        return list(work(iter(items)))
    listed = list(items)
    # One task per item, as DataFrame operations (no RDD: a Spark Connect session has none):
    # task i runs ``work`` over item i and hands its results back pickled.
    tasks = spark.range(0, len(listed), 1, len(listed))
    rows = tasks.mapInArrow(functools.partial(_run_items, listed, work), "results binary")
    return [r for row in rows.collect() for r in pickle.loads(row[0])]


def _run_items(items: Sequence[T], work: Callable[[Iterator[T]], Iterator[R]],
               batches: Iterator[Any]) -> Iterator[Any]:
    """On an executor: ``work`` over the items whose indexes the task's rows hold."""
    import pyarrow as pa

    for batch in batches:
        picked = [items[i] for i in batch.column(0).to_pylist()]
        if picked:
            done = pickle.dumps(list(work(iter(picked))), protocol=pickle.HIGHEST_PROTOCOL)
            yield pa.RecordBatch.from_pydict({"results": pa.array([done], pa.binary())})


def in_process(spark: SparkSession, input_bytes: int) -> bool:
    """Whether work over ``input_bytes`` of files is cheaper right here than in a Spark job:
    at most :data:`IN_PROCESS_BYTES`, and the executors share this machine's disk."""
    return input_bytes <= IN_PROCESS_BYTES and on_this_machine(spark)
