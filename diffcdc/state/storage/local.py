"""A state folder on a local disk or a mount, using nothing but exclusive create and rename.

No ``link()`` and no ``flock``: FUSE mounts (Fabric ``/lakehouse/default/Files``, Databricks
``/Volumes``, blobfuse) and many network file systems have neither. What is used:

* ``put_if_absent``: the content is written fully (and fsynced) to a fresh temporary file
  created with ``O_CREAT|O_EXCL``; the final name is then reserved with ``O_CREAT|O_EXCL``
  (exactly one writer gets it) and the temporary file renamed over the writer's own empty
  reservation. A reader may see the empty reservation for that moment and treats it as "not
  there yet"; a writer killed in between leaves it empty, which the next holder of the table's
  lease removes (:meth:`TableState.remove_abandoned`).
* ``replace_if``: the writer reads the document's tag (inode, mtime, size: every rename makes a
  new inode), then creates the marker ``<name>.cas.<tag>.<n>`` with ``O_CREAT|O_EXCL``: of two
  writers that read the same version, exactly one creates it and renames its new version in.
  A marker older than ``stale_after`` whose document still has that tag belongs to a writer
  that died half-way; the next attempt uses ``n + 1``.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

from diffcdc.state.storage.base import StateStorage, Tagged

_CAS = ".cas."


class LocalStateStorage(StateStorage):
    """A state folder in a local (or mounted) directory."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

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
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Tagged(data, f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}", st.st_mtime)

    def list(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._abs(folder)) as entries:
                return sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- writing ---------------------------------------------------------------------------

    def _write_temp(self, final: str, data: bytes) -> str:
        """Write ``data`` fully to a fresh hidden file beside ``final``; returns its path."""
        folder = os.path.dirname(final)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        os.close(fd)
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temp(final, data)
        try:
            if not _create_exclusive(final):
                raise FileExistsError(f"{final} already exists")
            os.replace(tmp, final)  # over our own empty reservation, nobody else's
        finally:
            _unlink_quietly(tmp)
        _fsync_dir(os.path.dirname(final))

    def put(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temp(final, data)
        try:
            os.replace(tmp, final)
        finally:
            _unlink_quietly(tmp)

    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        final = self._abs(path)
        current = self.read(path)
        if current is None or current.tag != tag:
            return False
        folder, name = os.path.split(final)
        prefix = f"{name}{_CAS}{tag}."
        attempts = sorted(
            (int(n[len(prefix):]), n)
            for n in self.list(os.path.relpath(folder, self.root))
            if n.startswith(prefix) and n[len(prefix):].isdigit()
        )
        attempt = 0
        if attempts:
            last, marker = attempts[-1]
            age = _age(os.path.join(folder, marker))
            if age is not None and age < stale_after:
                return False  # another writer is replacing it (or died a moment ago)
            attempt = last + 1
        mine = os.path.join(folder, f"{prefix}{attempt}")
        if not _create_exclusive(mine):
            return False
        again = self.read(path)
        if again is None or again.tag != tag:
            # another writer replaced it between our read and our marker (and removed its own
            # marker already): the tag is gone for good, so ours would only be left behind
            _unlink_quietly(mine)
            return False
        tmp = self._write_temp(final, data)
        try:
            os.replace(tmp, final)
        finally:
            _unlink_quietly(tmp)
        _fsync_dir(folder)
        for _, marker in attempts:
            _unlink_quietly(os.path.join(folder, marker))
        _unlink_quietly(mine)
        return True

    def delete(self, path: str) -> None:
        _unlink_quietly(self._abs(path))
        folder, name = os.path.split(self._abs(path))
        for other in self.list(os.path.relpath(folder, self.root)):
            if other.startswith(f"{name}{_CAS}"):
                _unlink_quietly(os.path.join(folder, other))


def _create_exclusive(path: str) -> bool:
    """Create an empty file at ``path`` if the name is free (``O_CREAT|O_EXCL``)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _age(path: str) -> float | None:
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return None


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
