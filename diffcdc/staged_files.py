"""Files that Spark's executors write into a staging folder, handled the way Spark sees them.

Part files and encoded files are written by executors, so the driver never lists, renames or
deletes them with ``os``: a FUSE mount (blobfuse, ``/lakehouse/default/Files``, ``/Volumes``)
may show the driver a stale listing, and its rename may be a copy. Here they are listed,
renamed and removed through Hadoop's ``FileSystem`` of the folder's path (through the JVM
gateway), which is the file system Spark wrote them with; on ``abfss://`` that rename is the
server's own. Facts about a file that need its bytes (rows, size, SHA-256) are computed by
the executors (:func:`on_executors`); the driver collects only those small tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from diffcdc.errors import StateError
from diffcdc.spark import on_this_machine
from diffcdc.storage import paths, registry

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class HadoopFile:
    """One file of a listing: its Hadoop path, its name, its size and where a node opens it."""

    uri: str
    name: str
    size: int
    #: The path on the node's own file system (``file:`` paths only), else None.
    local: str | None

    def on_nodes(self, table: str, what: str) -> str:
        """The path every node opens the file by (``what`` names it: "state file", "staged
        part"); refused when it is not on a file system mounted on every node."""
        return on_nodes(self.local, self.uri, table, what)


def on_nodes(local: str | None, uri: str, table: str, what: str) -> str:
    """The path every node opens ``uri`` by (through :mod:`diffcdc.storage.paths`): ``local`` for a
    file on the node's own file system, the URI itself on a file system diffcdc reads by URL
    (``webhdfs://``); a one-line StateError for any other (its files are out of reach)."""
    if local is not None:
        return local
    if paths.scheme(uri) in registry.DATA_SCHEMES:
        return uri
    raise StateError(
        f"{what} {uri} is on a file system diffcdc's own reads do not reach",
        table=table,
        path=uri,
        hint="give state_data as a local path, a mount the Spark driver and executors share, "
        f"or a {' or '.join(s + '://' for s in registry.DATA_SCHEMES)} URL (see docs/state.md)",
    )


class HadoopFolder:
    """A folder on the Hadoop file system of its path (a local path means ``file:``)."""

    def __init__(self, spark: SparkSession, folder: str, *, table: str) -> None:
        jvm = spark._jvm  # type: ignore[attr-defined]
        assert jvm is not None
        self._hadoop_path, checksum = _hadoop_classes(jvm)
        self.table = table
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        fs = self._hadoop_path(folder).getFileSystem(conf)
        self._path = fs.makeQualified(self._hadoop_path(folder))
        # Hadoop's local file system moves a hidden ``.crc`` file along with every rename;
        # staged files are named for consumers that must not see those, so use the raw one.
        self._fs = fs.getRawFileSystem() if checksum.isInstance(fs) else fs
        self.folder = self._path.toString()
        #: The folder as a path on the node's own file system (``file:`` only), else None.
        self.local: str | None = _local(self._path)

    def _child(self, name: str) -> Any:
        # Not Path(parent, name): a relative name with a colon ("2024-01-01T00:00") would parse
        # as a URI scheme. After the folder's scheme and path, a colon is just a character.
        return self._hadoop_path(f"{self.folder.rstrip('/')}/{name}")

    def files(self) -> list[HadoopFile]:
        """The files directly in the folder, by name (none when the folder does not exist)."""
        if not self._fs.exists(self._path):
            return []
        out = []
        for status in self._fs.listStatus(self._path):
            if not status.isFile():
                continue
            path = status.getPath()
            out.append(HadoopFile(path.toString(), path.getName(), int(status.getLen()), _local(path)))
        return sorted(out, key=lambda f: f.name)

    def data_files(self) -> list[HadoopFile]:
        """Every data file below the folder (as a Spark-written Parquet folder holds them:
        hidden and ``_`` files and folders skipped), named relative to the folder, by name."""
        out: list[HadoopFile] = []
        pending = [(self._path, "")] if self._fs.exists(self._path) else []
        while pending:
            folder, prefix = pending.pop()
            for status in self._fs.listStatus(folder):
                path = status.getPath()
                name = str(path.getName())
                if name.startswith((".", "_")):
                    continue
                if status.isDirectory():
                    pending.append((path, f"{prefix}{name}/"))
                elif status.isFile():
                    size = int(status.getLen())
                    out.append(HadoopFile(path.toString(), prefix + name, size, _local(path)))
        return sorted(out, key=lambda f: f.name)

    def child(self, name: str) -> str:
        """The Hadoop path of ``name`` inside the folder."""
        return self._child(name).toString()

    def mkdirs(self) -> None:
        self._fs.mkdirs(self._path)

    def rename_in(self, source: str, name: str) -> None:
        """Move ``source`` (a Hadoop path of the same file system) to ``name`` in this folder."""
        src = self._hadoop_path(source)
        try:
            done, why = bool(self._fs.rename(src, self._child(name))), ""
        except Py4JJavaError as exc:  # the local file system copies when renameTo fails
            done, why = False, f" ({str(exc.java_exception.getMessage()).splitlines()[0]})"
        if not done:
            raise StateError(
                f"could not rename staged file {source} to {self.child(name)}{why}",
                table=self.table,
                path=source,
                hint="the file is not visible on the file system Spark wrote it to: the state "
                "folder must be one the Spark driver and executors share (see docs/state.md)",
            )

    def delete(self) -> None:
        """Remove the folder and everything in it (no error when it does not exist)."""
        self._fs.delete(self._path, True)


#: Per JVM gateway: Hadoop's ``Path`` class and the ``ChecksumFileSystem`` class. Py4J finds
#: ``jvm.org.apache.hadoop.fs.Path`` one package at a time, each step a class lookup through
#: every jar (~2 ms); the class objects it returns can be kept.
_CLASSES: dict[int, tuple[Any, Any, Any]] = {}


def _hadoop_classes(jvm: Any) -> tuple[Any, Any]:
    found = _CLASSES.get(id(jvm))
    if found is None or found[0] is not jvm:
        fs = jvm.org.apache.hadoop.fs
        found = _CLASSES[id(jvm)] = (jvm, fs.Path, jvm.java.lang.Class.forName(fs.ChecksumFileSystem._fqn))
    return found[1], found[2]


def _local(path: Any) -> str | None:
    uri = path.toUri()
    return str(uri.getPath()) if uri.getScheme() in (None, "file") else None


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
    return spark.sparkContext.parallelize(list(items), len(items)).mapPartitions(work).collect()


def in_process(spark: SparkSession, input_bytes: int) -> bool:
    """Whether work over ``input_bytes`` of files is cheaper right here than in a Spark job:
    at most :data:`IN_PROCESS_BYTES`, and the executors share this machine's disk."""
    return input_bytes <= IN_PROCESS_BYTES and on_this_machine(spark)
