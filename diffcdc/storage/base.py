"""The byte store: the few primitives exactly-once rests on, for state and every sink alike.

A store is a folder on some file system (a local disk or mount, ADLS Gen2 / OneLake, WebHDFS);
paths given to it are relative to that folder and use ``/``. It knows nothing about tables,
versions, JSON or landing zones; :mod:`diffcdc.state` and the sinks do. What it offers:

* ``read`` (a file's bytes with the tag of this version of it), ``list`` (the files directly in
  a folder), ``stat``, ``open_read``;
* ``put_if_absent`` / ``put_file_if_absent``: create a file, complete or not at all, only if
  its name is free (commit records, marks, a new lease, a landing file) — the content goes to
  a fresh ``_``-prefixed temporary name beside the target first, then is renamed into place;
* ``replace_if``: replace a file only if it is still the version read before (its
  :attr:`Tagged.tag`) — how a lease is renewed and taken over by exactly one taker;
* ``rename``: move a file to a free name, never over an existing one;
* ``put`` (replace unconditionally: reports), ``delete``, ``delete_tree``.

*Commit state unknown* is handled here, once for every backend: a rename (or put) whose first
answer was lost and whose retry finds the target present checks whether the target is its
own — its temporary source is gone (nobody else knows that name) and, for a put, the target
holds exactly the bytes it wrote — before it reports a conflict (FileExistsError).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import IO, Any

from diffcdc.errors import StorageError

log = logging.getLogger("diffcdc")

#: Suffix of our own temporary upload names (``_<final name>.<random>.diffcdc-tmp``).
TEMP_SUFFIX = ".diffcdc-tmp"


@dataclass(frozen=True)
class Tagged:
    """A file's bytes with the tag of this version of it (an ETag, or its identity)."""

    data: bytes
    tag: str
    #: Last modification, seconds since the epoch (as the store stamps it).
    mtime: float


@dataclass(frozen=True)
class FileInfo:
    """One file of a folder."""

    name: str  #: base name, no folder
    size: int  #: bytes
    mtime: float  #: last modification, seconds since the epoch


def temp_name_for(final_name: str) -> str:
    """The temporary name a file is written under before its rename to ``final_name``."""
    return f"_{final_name}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    return name.startswith("_") and name.endswith(TEMP_SUFFIX)


def join(*parts: str) -> str:
    """Join relative store path parts with ``/``, skipping empty ones."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def temp_beside(path: str) -> str:
    """A fresh temporary name in the folder of ``path``."""
    folder, _, name = path.rpartition("/")
    return join(folder, temp_name_for(name))


class ByteStore(ABC):
    """A folder on some file system (see the module docstring)."""

    #: Files a publisher may upload at once before renaming them in order (ADLS: more).
    parallel_uploads = 1

    # -- the backend's primitives ----------------------------------------------------------

    @abstractmethod
    def describe(self, path: str = "") -> str:
        """Where ``path`` is, for messages (a local path or a URL without secrets)."""

    @abstractmethod
    def read(self, path: str) -> Tagged | None:
        """The file at ``path`` with its tag, or None when there is none."""

    @abstractmethod
    def open_read(self, path: str) -> IO[bytes]:
        """The file at ``path`` opened for reading; FileNotFoundError when there is none."""

    @abstractmethod
    def list(self, folder: str) -> list[FileInfo]:
        """The files (not folders) directly in ``folder``, by name; ``[]`` when it does not
        exist."""

    @abstractmethod
    def folders(self, folder: str) -> list[str]:
        """Names of the folders directly in ``folder``, sorted; ``[]`` when it does not exist."""

    @abstractmethod
    def stat(self, path: str) -> FileInfo | None:
        """The file at ``path``, or None when there is none (or it is a folder)."""

    @abstractmethod
    def write_temp(self, path: str, source: bytes | IO[bytes]) -> str:
        """Write ``source`` fully under a fresh temporary name beside ``path``; that name.

        Nothing is left behind when it fails."""

    @abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Write ``path`` in place, replacing it (not atomic: for files nobody reads under
        that name before they are complete, such as an executor's output)."""

    @abstractmethod
    def _rename_new(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` only if ``target`` does not exist; FileExistsError
        when it does (whether ``source`` is still there or not). ``source`` is left in place
        when the rename fails."""

    @abstractmethod
    def _replace(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target``, replacing what is there."""

    @abstractmethod
    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        """Replace ``path`` with ``data`` only if it is still the version tagged ``tag``.

        Returns False (and changes nothing) when another writer replaced it first, or is
        replacing it right now. ``stale_after`` (seconds) bounds how long a writer that died
        half-way through a replace can hold the file up (stores without conditional writes).
        """

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete one file; no error when it does not exist."""

    @abstractmethod
    def delete_tree(self, folder: str) -> None:
        """Delete a folder and everything below it; no error when it does not exist."""

    @abstractmethod
    def folder_exists(self, folder: str) -> bool:
        """True when ``folder`` exists."""

    @abstractmethod
    def makedirs(self, folder: str, *, exist_ok: bool = True) -> None:
        """Create ``folder`` and its parents; FileExistsError when it exists and not
        ``exist_ok``."""

    def close(self) -> None:
        """Release connections and credentials; the store is not used afterwards."""

    def set_mtime(self, path: str, mtime: float) -> bool:
        """Set a file's modification time where the backend allows it; whether it did."""
        return False

    def read_only(self, folder: str) -> bool:
        """True when ``folder`` lies on a file system mounted read-only (no write or delete
        can work there until it is remounted); False where that cannot be told."""
        return False

    # -- exactly-once writes, on top of the primitives -------------------------------------

    def rename(self, source: str, target: str, *, expect: bytes | None = None) -> None:
        """Rename ``source`` to ``target``, never over an existing file (FileExistsError, and
        ``source`` is removed).

        Commit state unknown: a rename that landed but whose answer was lost is retried and
        finds ``target`` there. When ``source`` is gone (a temporary name only this writer
        knows) and ``target`` holds what it wrote (``expect``, when given), the target is
        this writer's own: the rename succeeded.
        """
        try:
            self._rename_new(source, target)
        except FileExistsError:
            if self.stat(source) is None and self._holds(target, expect):
                log.info("%s: the answer to its creation was lost; it holds what this writer "
                         "wrote", self.describe(target))
                return
            self.discard(source)
            raise FileExistsError(f"{self.describe(target)} already exists") from None
        except BaseException:
            self.discard(source)
            raise

    def _holds(self, path: str, expect: bytes | None) -> bool:
        """Whether ``path`` is there (holding ``expect``, when given)."""
        if expect is None:
            return self.stat(path) is not None
        found = self.read(path)
        return found is not None and found.data == expect

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data``, complete or not at all; FileExistsError if taken.

        A store whose rename may show the final name empty for a moment (a local mount
        without ``link()``) makes readers treat an empty file as not there yet
        (:meth:`read_bytes` returns None for it). Commit state unknown: a lost answer is this
        writer's own only when the target holds exactly ``data`` (every state document names
        its run and time).
        """
        self.rename(self.write_temp(path, data), path, expect=data)

    def put_file_if_absent(self, source: IO[bytes], path: str) -> None:
        """``put_if_absent`` with the content read from ``source`` (a file opened for reading)."""
        self.rename(self.write_temp(path, source), path)

    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` atomically, replacing what was there (reports, requests)."""
        temp = self.write_temp(path, data)
        try:
            self._replace(temp, path)
        except BaseException:
            self.discard(temp)
            raise

    def discard(self, path: str) -> None:
        """Delete a temporary file; a failure only leaves it for the next run's clean-up."""
        try:
            self.delete(path)
        except (OSError, StorageError) as err:
            log.warning("could not remove temporary file %s: %s", self.describe(path), err)

    # -- reading helpers -------------------------------------------------------------------

    def names(self, folder: str) -> list[str]:
        """Names of the files directly in ``folder``, sorted."""
        return [f.name for f in self.list(folder)]

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes; None when absent or still empty (being created)."""
        found = self.read(path)
        return found.data if found is not None and found.data else None

    def read_json(self, path: str) -> Any:
        """The JSON document at ``path``, or None (absent or still empty); ValueError when it
        is not valid JSON."""
        data = self.read_bytes(path)
        return None if data is None else json.loads(data)

    def exists(self, path: str) -> bool:
        """Whether ``path`` holds a complete (non-empty) document."""
        return self.read_bytes(path) is not None

    def at(self, prefix: str) -> ByteStore:
        """The folder ``prefix`` of this store as a store of its own (sharing connections)."""
        return Below(self, prefix) if prefix.strip("/") else self


class Below(ByteStore):
    """The folder ``prefix`` of another store; closing it leaves the other open."""

    def __init__(self, store: ByteStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.parallel_uploads = store.parallel_uploads

    def _p(self, path: str) -> str:
        return join(self.prefix, path)

    def describe(self, path: str = "") -> str:
        return self.store.describe(self._p(path))

    def read(self, path: str) -> Tagged | None:
        return self.store.read(self._p(path))

    def open_read(self, path: str) -> IO[bytes]:
        return self.store.open_read(self._p(path))

    def list(self, folder: str) -> list[FileInfo]:
        return self.store.list(self._p(folder))

    def folders(self, folder: str) -> list[str]:
        return self.store.folders(self._p(folder))

    def stat(self, path: str) -> FileInfo | None:
        return self.store.stat(self._p(path))

    def write_temp(self, path: str, source: bytes | IO[bytes]) -> str:
        return self.store.write_temp(self._p(path), source)[len(self.prefix) + 1:]

    def write(self, path: str, data: bytes) -> None:
        self.store.write(self._p(path), data)

    def _rename_new(self, source: str, target: str) -> None:
        self.store._rename_new(self._p(source), self._p(target))

    def _replace(self, source: str, target: str) -> None:
        self.store._replace(self._p(source), self._p(target))

    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        return self.store.replace_if(self._p(path), data, tag, stale_after=stale_after)

    def delete(self, path: str) -> None:
        self.store.delete(self._p(path))

    def delete_tree(self, folder: str) -> None:
        self.store.delete_tree(self._p(folder))

    def folder_exists(self, folder: str) -> bool:
        return self.store.folder_exists(self._p(folder))

    def makedirs(self, folder: str, *, exist_ok: bool = True) -> None:
        self.store.makedirs(self._p(folder), exist_ok=exist_ok)

    def set_mtime(self, path: str, mtime: float) -> bool:
        return self.store.set_mtime(self._p(path), mtime)

    def read_only(self, folder: str) -> bool:
        return self.store.read_only(self._p(folder))


#: Marker names of a replace in progress: ``<name>.cas.<tag>.<attempt>``.
_CAS = ".cas."


class MarkerReplace(ByteStore):
    """``replace_if`` for stores without conditional writes, from exclusive create and rename.

    The writer reads the file's tag, then creates the marker ``<name>.cas.<tag>.<n>`` with an
    exclusive create: of two writers that read the same version, exactly one creates it and
    renames its new version in. A marker older than ``stale_after`` whose file still has that
    tag belongs to a writer that died half-way; the next attempt uses ``n + 1``.
    """

    @abstractmethod
    def _create_empty(self, path: str) -> bool:
        """Create an empty file at ``path`` if the name is free; whether this call did."""

    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        current = self.read(path)
        if current is None or current.tag != tag:
            return False
        folder, _, name = path.rpartition("/")
        prefix = f"{name}{_CAS}{tag}."
        attempts = sorted(
            (int(n[len(prefix):]), n)
            for n in self.names(folder)
            if n.startswith(prefix) and n[len(prefix):].isdigit()
        )
        attempt = 0
        if attempts:
            last, marker = attempts[-1]
            info = self.stat(join(folder, marker))
            if info is not None and time.time() - info.mtime < stale_after:
                return False  # another writer is replacing it (or died a moment ago)
            attempt = last + 1
        mine = join(folder, f"{prefix}{attempt}")
        if not self._create_empty(mine):
            return False
        again = self.read(path)
        if again is None or again.tag != tag:
            # another writer replaced it between our read and our marker (and removed its own
            # marker already): the tag is gone for good, so ours would only be left behind
            self.delete(mine)
            return False
        self.put(path, data)
        for _, marker in attempts:
            self.delete(join(folder, marker))
        self.delete(mine)
        return True

    def delete(self, path: str) -> None:
        self._delete_file(path)
        folder, _, name = path.rpartition("/")
        for other in self.names(folder):
            if other.startswith(f"{name}{_CAS}"):
                self._delete_file(join(folder, other))

    @abstractmethod
    def _delete_file(self, path: str) -> None:
        """Delete one file; no error when it does not exist."""
