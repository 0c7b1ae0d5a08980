"""Files by full path or URL, opened by the driver and the executors alike.

The state data folder (``state_data``, see :mod:`diffcdc.state.root`) is a local path — a
folder, or a mount every node shares — or a URL of a Hadoop file system that Spark writes
through (``webhdfs://namenode:port/path``). Spark reads and writes the Parquet there; what
diffcdc's own Python code does with those files (hash a state file, encode a staged part, read
a staged change set to publish it, remove an old version) goes through the functions here,
each on the store of its path's scheme (:mod:`diffcdc.storage.registry`): a local path on the
local backend, a URL on the WebHDFS backend.
"""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import replace
from typing import IO, Any
from urllib.parse import urlsplit

from diffcdc.storage.base import ByteStore, FileInfo
from diffcdc.storage.local import LocalStore
from diffcdc.storage.registry import is_url, local_path, open_store, scheme

__all__ = ["is_url", "local_path", "scheme"]

_LOCAL = LocalStore(os.sep)


@functools.lru_cache(maxsize=16)
def _server(root: str) -> ByteStore:
    return open_store(root)


def store_of(path: str) -> tuple[ByteStore, str]:
    """The store of ``path``'s file system and the path on it."""
    if not is_url(path):
        return _LOCAL, os.path.abspath(local_path(path))
    parts = urlsplit(path)
    return _server(f"{parts.scheme}://{parts.netloc}/"), parts.path


def join(folder: str, *names: str) -> str:
    """``folder``/``names`` (a URL keeps its scheme and host)."""
    return posixpath.join(folder, *names) if is_url(folder) else os.path.join(folder, *names)


def relative(path: str, folder: str) -> str:
    """``path`` relative to ``folder`` (a path below it)."""
    if not is_url(path):
        return os.path.relpath(path, folder)
    prefix = folder.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not below {folder}")
    return path[len(prefix):]


def open_read(path: str) -> IO[bytes]:
    """The file at ``path`` opened for reading (seekable)."""
    store, inner = store_of(path)
    return store.open_read(inner)


def read_bytes(path: str) -> bytes:
    with open_read(path) as handle:
        return handle.read()


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` as the file ``path`` (replaced when it exists)."""
    store, inner = store_of(path)
    store.write(inner, data)


def size(path: str) -> int:
    store, inner = store_of(path)
    info = store.stat(inner)
    if info is None:
        raise FileNotFoundError(path)
    return info.size


def exists(path: str) -> bool:
    store, inner = store_of(path)
    return store.stat(inner) is not None or store.folder_exists(inner)


def isdir(path: str) -> bool:
    store, inner = store_of(path)
    return store.folder_exists(inner)


def listdir(path: str) -> list[str]:
    """The names directly in folder ``path``, sorted; none when it does not exist."""
    store, inner = store_of(path)
    return sorted([*store.names(inner), *store.folders(inner)])


def data_files(folder: str) -> list[str]:
    """The data files below ``folder`` as a Spark-written Parquet folder holds them, named
    relative to it (hidden and ``_`` files and folders skipped), sorted."""
    return [f.name for f in data_file_infos(folder)]


def data_file_infos(folder: str) -> list[FileInfo]:
    """:func:`data_files` with their sizes and times."""
    store, inner = store_of(folder)
    out: list[FileInfo] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        here = posixpath.join(inner, prefix) if prefix else inner
        out.extend(
            replace(f, name=prefix + f.name)
            for f in store.list(here)
            if not f.name.startswith((".", "_"))
        )
        pending.extend(f"{prefix}{n}/" for n in store.folders(here) if not n.startswith((".", "_")))
    return sorted(out, key=lambda f: f.name)


def makedirs(path: str, exist_ok: bool = True) -> None:
    store, inner = store_of(path)
    store.makedirs(inner, exist_ok=exist_ok)


def remove_tree(path: str) -> None:
    """Remove the file or folder ``path`` and everything in it; nothing when it is missing."""
    store, inner = store_of(path)
    store.delete_tree(inner)


def move(source: str, target: str) -> None:
    """Rename ``source`` to ``target`` on the same file system (a file: replacing one)."""
    store, inner = store_of(source)
    store._replace(inner, store_of(target)[1])


def arrow_source(path: str) -> tuple[Any, str]:
    """``(filesystem, path)`` for pyarrow's readers (``filesystem=None`` for a local path)."""
    if not is_url(path):
        return None, local_path(path)
    from diffcdc.storage.webhdfs import WebHdfsStore

    store, inner = store_of(path)
    assert isinstance(store, WebHdfsStore)
    return store.fs, inner
