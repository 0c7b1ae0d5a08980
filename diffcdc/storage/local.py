"""A store in a local folder, or a mount (also one without ``link()`` and ``flock``).

A file is written fully (and fsynced) under a fresh temporary name, then put in place:

* rename without overwrite is ``link()`` (it fails with EEXIST when the name is taken) and
  the temporary name's removal;
* on a mount without ``link()`` (FUSE: Fabric ``/lakehouse/default/Files``, Databricks
  ``/Volumes``, blobfuse; many network file systems), when the store is opened with
  ``reservations=True`` (state: its readers treat an empty file as not there yet), the final
  name is reserved with ``O_CREAT|O_EXCL`` (exactly one writer gets it) and the temporary file
  renamed over the writer's own empty reservation. A writer killed in between leaves it
  empty, which the next holder of the table's lease removes
  (:meth:`~diffcdc.state.store.TableState.remove_abandoned`). Without ``reservations`` (a
  landing zone, whose reader must never see an empty file) such a mount is refused;
* ``replace_if`` by markers (:class:`~diffcdc.storage.base.MarkerReplace`); a file's tag is
  its inode, mtime and size (every rename makes a new inode).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from typing import IO

from diffcdc.errors import StorageError
from diffcdc.storage.base import FileInfo, MarkerReplace, Tagged, temp_beside

#: ``link()`` failing with one of these means the file system has none.
_NO_LINK = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.ENOSYS, errno.EXDEV})


class LocalStore(MarkerReplace):
    """A local (or mounted) folder."""

    def __init__(self, root: str, *, reservations: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.reservations = reservations

    def describe(self, path: str = "") -> str:
        return self._abs(path) if path else self.root

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, *[p for p in path.split("/") if p])

    # -- reading ---------------------------------------------------------------------------

    def read(self, path: str) -> Tagged | None:
        try:
            with open(self._abs(path), "rb") as handle:
                data = handle.read()
                st = os.fstat(handle.fileno())
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        return Tagged(data, f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}", st.st_mtime)

    def open_read(self, path: str) -> IO[bytes]:
        return open(self._abs(path), "rb")

    def list(self, folder: str) -> list[FileInfo]:
        base = self._abs(folder)
        try:
            with os.scandir(base) as entries:
                found = [
                    (e.name, e.stat(follow_symlinks=False))
                    for e in entries
                    if e.is_file(follow_symlinks=False)
                ]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {base}: {exc}", path=base) from exc
        return sorted((FileInfo(n, st.st_size, st.st_mtime) for n, st in found),
                      key=lambda f: f.name)

    def folders(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._abs(folder)) as entries:
                return sorted(e.name for e in entries if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def stat(self, path: str) -> FileInfo | None:
        full = self._abs(path)
        try:
            st = os.stat(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not os.path.isfile(full):
            return None
        return FileInfo(os.path.basename(full), st.st_size, st.st_mtime)

    def folder_exists(self, folder: str) -> bool:
        return os.path.isdir(self._abs(folder))

    # -- writing ---------------------------------------------------------------------------

    def write_temp(self, path: str, source: bytes | IO[bytes]) -> str:
        temp = temp_beside(path)
        full = self._abs(temp)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as handle:
                if isinstance(source, bytes):
                    handle.write(source)
                else:
                    shutil.copyfileobj(source, handle, 1 << 20)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            _unlink_quietly(full)
            raise
        return temp

    def write(self, path: str, data: bytes) -> None:
        with open(self._abs(path), "wb") as handle:
            handle.write(data)

    def _rename_new(self, source: str, target: str) -> None:
        src, dst = self._abs(source), self._abs(target)
        try:
            os.link(src, dst)
        except FileExistsError:
            raise
        except FileNotFoundError:
            if os.path.lexists(dst):  # an earlier attempt moved it
                raise FileExistsError(dst) from None
            raise
        except OSError as exc:
            if exc.errno not in _NO_LINK or not self.reservations:
                raise
            if not self._create_empty(target):
                raise FileExistsError(dst) from None
            os.replace(src, dst)  # over our own empty reservation, nobody else's
        else:
            os.unlink(src)
        _fsync_dir(os.path.dirname(dst))

    def _replace(self, source: str, target: str) -> None:
        os.replace(self._abs(source), self._abs(target))
        _fsync_dir(os.path.dirname(self._abs(target)))

    def _create_empty(self, path: str) -> bool:
        full = self._abs(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def _delete_file(self, path: str) -> None:
        _unlink_quietly(self._abs(path))

    def delete_tree(self, folder: str) -> None:
        full = self._abs(folder)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        elif os.path.lexists(full):
            os.unlink(full)

    def makedirs(self, folder: str, *, exist_ok: bool = True) -> None:
        os.makedirs(self._abs(folder), exist_ok=exist_ok)

    def read_only(self, folder: str) -> bool:
        try:
            return bool(os.statvfs(self._abs(folder)).f_flag & os.ST_RDONLY)
        except OSError:
            return False

    def set_mtime(self, path: str, mtime: float) -> bool:
        ns = int(mtime * 1_000_000_000)
        os.utime(self._abs(path), ns=(ns, ns))
        return True


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms or mounts without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some FUSE mounts refuse fsync on directories
        pass
    finally:
        os.close(fd)
