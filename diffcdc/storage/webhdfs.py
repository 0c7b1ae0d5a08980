"""A store on HDFS over WebHDFS (``webhdfs://namenode:port/path``), through fsspec's client.

The state data folder (``state_data``) may be such a URL: Spark writes the Parquet there
through Hadoop, diffcdc's own code (hash a state file, encode a staged part, read a staged
change set to publish it, remove an old version) through this store, on the driver and on
every executor alike.

fsspec reads its options for a protocol from the environment as well
(``FSSPEC_WEBHDFS_USER=etl``, ``FSSPEC_WEBHDFS='{"kerberos": true}'``), so a cluster that
needs a user or Kerberos sets them on the driver and executors (docs/state.md).

HDFS semantics give the primitives: ``CREATE`` with ``overwrite=false`` is an exclusive create
(the namenode decides), ``RENAME`` never replaces a file (it answers false); ``replace_if``
uses markers (:class:`~diffcdc.storage.base.MarkerReplace`), a file's tag being its id,
modification time and length.
"""

from __future__ import annotations

import contextlib
import posixpath
import shutil
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from diffcdc.errors import StorageError, TransientStorageError
from diffcdc.storage.base import FileInfo, MarkerReplace, Tagged, join, temp_beside

if TYPE_CHECKING:
    from fsspec.implementations.webhdfs import WebHDFS

#: Errors that keep their meaning at a URL (a missing file is a missing file).
_PLAIN = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)


class WebHdfsStore(MarkerReplace):
    """The folder of a ``webhdfs://`` URL."""

    def __init__(self, url: str) -> None:
        from fsspec.core import url_to_fs

        self.url = url.rstrip("/")
        fs, root = url_to_fs(self.url)
        self.fs: WebHDFS = fs
        self.root = root.rstrip("/") or "/"

    def describe(self, path: str = "") -> str:
        return join(self.url, path) if path else self.url

    def _abs(self, path: str) -> str:
        return posixpath.join(self.root, path.strip("/")) if path.strip("/") else self.root

    @contextlib.contextmanager
    def _remote(self, action: str, path: str) -> Iterator[None]:
        """A failure of the server as one line naming the file (not a missing file)."""
        try:
            yield
        except _PLAIN:
            raise
        except Exception as exc:
            module = type(exc).__module__.split(".", 1)[0]
            unreachable = module in ("requests", "urllib3") or isinstance(exc, ConnectionError)
            error = TransientStorageError if unreachable else StorageError
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            where = self.describe(path)
            raise error(
                f"could not {action} {where}: {first}",
                path=where,
                hint="check that the server of state_data is up and reachable from the driver "
                "and every executor, then run again",
            ) from None

    # -- reading ---------------------------------------------------------------------------

    def _info(self, path: str) -> dict[str, Any] | None:
        try:
            with self._remote("look for", path):
                return dict(self.fs.info(self._abs(path)))
        except FileNotFoundError:
            return None

    def read(self, path: str) -> Tagged | None:
        while True:
            before = self._info(path)
            if before is None or before["type"] != "file":
                return None
            try:
                with self._remote("read", path):
                    data = bytes(self.fs.cat_file(self._abs(path)))
            except FileNotFoundError:
                return None
            after = self._info(path)
            if after == before:  # the tag is the one of these bytes
                return Tagged(data, _tag(before), before["modificationTime"] / 1000)

    def open_read(self, path: str) -> IO[bytes]:
        with self._remote("open", path):
            return self.fs.open(self._abs(path), "rb")

    def _entries(self, folder: str) -> list[dict[str, Any]]:
        try:
            with self._remote("list", folder):
                return list(self.fs.ls(self._abs(folder), detail=True))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list(self, folder: str) -> list[FileInfo]:
        return sorted(
            (
                FileInfo(e["pathSuffix"], int(e["length"]), e["modificationTime"] / 1000)
                for e in self._entries(folder)
                if e["type"] == "file"
            ),
            key=lambda f: f.name,
        )

    def folders(self, folder: str) -> list[str]:
        return sorted(e["pathSuffix"] for e in self._entries(folder) if e["type"] == "directory")

    def stat(self, path: str) -> FileInfo | None:
        info = self._info(path)
        if info is None or info["type"] != "file":
            return None
        return FileInfo(posixpath.basename(path), int(info["length"]), info["modificationTime"] / 1000)

    def folder_exists(self, folder: str) -> bool:
        info = self._info(folder)
        return info is not None and info["type"] == "directory"

    # -- writing ---------------------------------------------------------------------------

    def write_temp(self, path: str, source: bytes | IO[bytes]) -> str:
        temp = temp_beside(path)
        try:
            with self._remote("write", temp):
                if isinstance(source, bytes):
                    self.fs.pipe_file(self._abs(temp), source)
                else:
                    with self.fs.open(self._abs(temp), "wb") as handle:
                        shutil.copyfileobj(source, handle, 1 << 20)
        except BaseException:
            self.discard(temp)
            raise
        return temp

    def write(self, path: str, data: bytes) -> None:
        with self._remote("write", path):
            self.fs.pipe_file(self._abs(path), data)

    def _rename_call(self, source: str, target: str) -> bool:
        with self._remote("rename", source):
            answer = self.fs._call(
                "RENAME", method="put", path=self._abs(source), destination=self._abs(target)
            )
            return bool(answer.json().get("boolean"))

    def _rename_new(self, source: str, target: str) -> None:
        if self.stat(target) is not None:
            raise FileExistsError(self.describe(target))
        if self._rename_call(source, target):
            return
        if self.stat(target) is not None:
            raise FileExistsError(self.describe(target))
        raise StorageError(
            f"could not rename {self.describe(source)} to {self.describe(target)}",
            path=self.describe(source),
            hint="check that the server of state_data is up and the folder writable, then run "
            "again",
        )

    def _replace(self, source: str, target: str) -> None:
        self._delete_file(target)
        self._rename_new(source, target)

    def _create_empty(self, path: str) -> bool:
        try:
            with self._remote("create", path):
                answer = self.fs._call(
                    "CREATE", method="put", path=self._abs(path), redirect=False,
                    overwrite="false",
                )
                written = self.fs.session.put(
                    self.fs._apply_proxy(answer.headers["Location"]),
                    headers={"content-type": "application/octet-stream"},
                )
                written.raise_for_status()
        except StorageError:
            if self.stat(path) is not None:
                return False  # the namenode refused: the name is taken
            raise
        return True

    def _delete_file(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError), self._remote("remove", path):
            self.fs.rm_file(self._abs(path))

    def delete_tree(self, folder: str) -> None:
        with contextlib.suppress(FileNotFoundError), self._remote("remove", folder):
            self.fs.rm(self._abs(folder), recursive=True)

    def makedirs(self, folder: str, *, exist_ok: bool = True) -> None:
        """Create ``folder`` (HDFS has real folders; Spark expects them)."""
        with self._remote("create the folder", folder):
            if not exist_ok and self.fs.exists(self._abs(folder)):
                raise FileExistsError(self.describe(folder))
            self.fs.makedirs(self._abs(folder), exist_ok=True)


def _tag(info: dict[str, Any]) -> str:
    return f"{info.get('fileId', '')}-{info['modificationTime']}-{info['length']}"
