"""A landing zone in a local (or mounted) folder.

A file is copied to a ``_``-prefixed temporary name, flushed to disk and hard-linked to its
final name: ``link()`` fails when the name is taken, so a final name is never overwritten.
"""

from __future__ import annotations

import os
import shutil

from diffcdc import datafs
from diffcdc.errors import StorageError
from diffcdc.sinks.storage.base import FileInfo, LandingStorage, temp_name_for


class LocalStorage(LandingStorage):
    """A landing zone in a local (or mounted) folder."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def describe(self) -> str:
        return self.root

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, *[p for p in path.split("/") if p])

    def list_dir(self, folder: str) -> list[FileInfo]:
        base = self._abs(folder)
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {base}: {exc}", path=base) from exc
        out = []
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                out.append(FileInfo(entry.name, st.st_size, st.st_mtime))
        return sorted(out, key=lambda f: f.name)

    def stat(self, path: str) -> FileInfo | None:
        full = self._abs(path)
        try:
            st = os.stat(full)
        except FileNotFoundError:
            return None
        if not os.path.isfile(full):
            return None
        return FileInfo(os.path.basename(full), st.st_size, st.st_mtime)

    def read_bytes(self, path: str) -> bytes:
        with open(self._abs(path), "rb") as handle:
            return handle.read()

    def put_if_absent(self, local_path: str, path: str) -> None:
        self._link_new(local_path, path)

    def _link_new(self, local_path: str, path: str, after: float | None = None) -> None:
        """Copy to a temporary name, optionally stamp it later than ``after`` (by 1 ms at
        least), then link it to its final name: it appears complete and with its final time."""
        final = self._abs(path)
        folder = os.path.dirname(final)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, temp_name_for(os.path.basename(final)))
        try:
            if datafs.is_url(local_path):  # staged in a state data folder at a URL
                with datafs.open_read(local_path) as source, open(tmp, "wb") as target:
                    shutil.copyfileobj(source, target, 1 << 20)
            else:
                shutil.copyfile(local_path, tmp)
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            if after is not None:
                own = os.stat(tmp).st_mtime_ns
                wanted = max(own, int(after * 1_000_000_000) + 1_000_000)
                if wanted != own:
                    os.utime(tmp, ns=(wanted, wanted))
            # link() is the no-overwrite rename: it fails with EEXIST when the name is taken.
            os.link(tmp, final)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        _fsync_dir(folder)

    def folder_exists(self, folder: str) -> bool:
        return os.path.isdir(self._abs(folder))

    def delete_tree(self, folder: str) -> None:
        if self.folder_exists(folder):
            shutil.rmtree(self._abs(folder))

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            pass

    def set_mtime(self, path: str, mtime: float) -> None:
        os.utime(self._abs(path), (mtime, mtime))

    def put_after(self, local_path: str, path: str, after: float) -> FileInfo:
        """Put the file in place with a modification time later than ``after``."""
        self._link_new(local_path, path, after)
        return self.stat_stamped_after(path, after)


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
