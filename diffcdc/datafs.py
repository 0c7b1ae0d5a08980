"""Files under the state data folder, opened by the driver and the executors themselves.

The state data folder (``state_data``, see :mod:`diffcdc.state.root`) is a local path — a
folder, or a mount every node shares — or a URL of a Hadoop file system that Spark writes
through (``webhdfs://namenode:port/path``). Spark reads and writes the Parquet there; what
diffcdc's own Python code does with those files (hash a state file, encode a staged part, read
a staged change set to publish it, remove an old version) goes through the functions here: a
local path by ``os`` exactly as before, a URL through fsspec (its WebHDFS client), on the
driver and on every executor alike.

fsspec reads its options for a protocol from the environment as well
(``FSSPEC_WEBHDFS_USER=etl``, ``FSSPEC_WEBHDFS='{"kerberos": true}'``), so a cluster that
needs a user or Kerberos sets them on the driver and executors (docs/state.md).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from diffcdc.errors import StorageError, TransientStorageError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: The URL schemes a state data folder may have (each tested end to end against a server).
DATA_SCHEMES = ("webhdfs",)


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return "://" in path and not path.startswith("file:")


def scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if is_url(path) else ""


def local_path(path: str) -> str:
    """A ``file:`` URI as a plain path (Hadoop qualifies local paths so); others unchanged."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


def _fs(path: str) -> tuple[AbstractFileSystem, str]:
    from fsspec.core import url_to_fs

    return url_to_fs(path)


#: Errors that keep their meaning at a URL (a missing file is a missing file).
_PLAIN = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)


@contextlib.contextmanager
def _remote(action: str, path: str) -> Iterator[None]:
    """A failure of the server behind ``path`` as one line naming it (not a missing file)."""
    try:
        yield
    except _PLAIN:
        raise
    except Exception as exc:
        module = type(exc).__module__.split(".", 1)[0]
        unreachable = module in ("requests", "urllib3") or isinstance(exc, ConnectionError)
        error = TransientStorageError if unreachable else StorageError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(
            f"could not {action} {path}: {first}",
            path=path,
            hint="check that the server of state_data is up and reachable from the driver and "
            "every executor, then run again",
        ) from None


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
    return path[len(prefix) :]


def open_read(path: str) -> IO[bytes]:
    """The file at ``path`` opened for reading (seekable)."""
    if not is_url(path):
        return open(local_path(path), "rb")
    with _remote("open", path):
        fs, inner = _fs(path)
        return fs.open(inner, "rb")


def read_bytes(path: str) -> bytes:
    if not is_url(path):
        with open(local_path(path), "rb") as handle:
            return handle.read()
    with _remote("read", path):
        fs, inner = _fs(path)
        return bytes(fs.cat_file(inner))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` as the file ``path`` (replaced when it exists)."""
    if not is_url(path):
        with open(local_path(path), "wb") as handle:
            handle.write(data)
        return
    with _remote("write", path):
        fs, inner = _fs(path)
        fs.pipe_file(inner, data)


def size(path: str) -> int:
    if not is_url(path):
        return os.path.getsize(local_path(path))
    with _remote("read the size of", path):
        fs, inner = _fs(path)
        return int(fs.size(inner))


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(local_path(path))
    with _remote("look for", path):
        fs, inner = _fs(path)
        return bool(fs.exists(inner))


def isdir(path: str) -> bool:
    if not is_url(path):
        return os.path.isdir(local_path(path))
    with _remote("look for", path):
        fs, inner = _fs(path)
        return bool(fs.isdir(inner))


def listdir(path: str) -> list[str]:
    """The names directly in folder ``path``, sorted; none when it does not exist."""
    if not is_url(path):
        try:
            return sorted(os.listdir(local_path(path)))
        except (FileNotFoundError, NotADirectoryError):
            return []
    try:
        with _remote("list", path):
            fs, inner = _fs(path)
            found = fs.ls(inner, detail=False)
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(str(name).rstrip("/")) for name in found)


def data_files(folder: str) -> list[str]:
    """The data files below ``folder`` as a Spark-written Parquet folder holds them, named
    relative to it (hidden and ``_`` files and folders skipped), sorted."""
    out: list[str] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        here = join(folder, prefix) if prefix else folder
        for name in listdir(here):
            if name.startswith((".", "_")):
                continue
            if isdir(join(here, name)):
                pending.append(f"{prefix}{name}/")
            else:
                out.append(prefix + name)
    return sorted(out)


def makedirs(path: str, exist_ok: bool = True) -> None:
    if not is_url(path):
        os.makedirs(local_path(path), exist_ok=exist_ok)
        return
    with _remote("create the folder", path):
        fs, inner = _fs(path)
        if not exist_ok and fs.exists(inner):
            raise FileExistsError(path)
        fs.makedirs(inner, exist_ok=True)


def remove_tree(path: str) -> None:
    """Remove the file or folder ``path`` and everything in it; nothing when it is missing."""
    if not is_url(path):
        local = local_path(path)
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local, ignore_errors=True)
        elif os.path.lexists(local):
            os.unlink(local)
        return
    with contextlib.suppress(FileNotFoundError), _remote("remove", path):
        fs, inner = _fs(path)
        fs.rm(inner, recursive=True)


def move(source: str, target: str) -> None:
    """Rename ``source`` to ``target`` on the same file system (a file: replacing one)."""
    if not is_url(source):
        os.replace(local_path(source), local_path(target))
        return
    with _remote("rename", source):
        fs, inner = _fs(source)
        _, inner_target = _fs(target)
        if fs.isfile(inner_target):
            fs.rm(inner_target)
        fs.mv(inner, inner_target)


def arrow_source(path: str) -> tuple[Any, str]:
    """``(filesystem, path)`` for pyarrow's readers (``filesystem=None`` for a local path)."""
    if not is_url(path):
        return None, local_path(path)
    with _remote("open", path):
        return _fs(path)
