"""Bytes IO for a landing zone: the small interface every landing back end implements.

Paths given to a storage are relative to its root and always use ``/``. A storage knows nothing
about tables, sequence numbers or formats; the landing-zone writer above it does.

The one rule that matters: a final name is created atomically and never overwritten. A file is
written under a ``_``-prefixed temporary name in the same folder and then renamed to its final
name with a condition that fails if the target exists. The mirroring service ignores
``_``-prefixed names, so it never sees a partial file.

The back ends are :class:`~diffcdc.sinks.storage.local.LocalStorage` (a local or mounted folder)
and :class:`~diffcdc.sinks.storage.adls.AdlsStorage` (ADLS Gen2 / OneLake); :func:`open_landing`
picks one from the landing root.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diffcdc.errors import PublishConflict, StorageError, TransientStorageError

#: Suffix of our own temporary upload names (``_<final name>.<run>.diffcdc-tmp``).
TEMP_SUFFIX = ".diffcdc-tmp"


@dataclass(frozen=True)
class FileInfo:
    """One file in a landing folder."""

    name: str  #: base name, no folder
    size: int  #: bytes
    mtime: float  #: last modification, seconds since the epoch


def temp_name_for(final_name: str) -> str:
    """The temporary name a file is uploaded under before its atomic rename."""
    return f"_{final_name}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    return name.startswith("_") and name.endswith(TEMP_SUFFIX)


def file_sha256(path: str) -> str:
    from diffcdc import datafs

    digest = hashlib.sha256()
    with datafs.open_read(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def join(*parts: str) -> str:
    """Join relative storage path parts with ``/``, skipping empty ones."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


@dataclass(frozen=True)
class PublishItem:
    """A staged local file and the landing path it must appear under."""

    local_path: str
    target: str  #: relative to the storage root
    sha256: str
    size: int


class LandingStorage(ABC):
    """A landing-zone root: a local folder, or a remote ADLS Gen2 / OneLake folder."""

    @abstractmethod
    def describe(self) -> str:
        """A display name for messages; never contains a secret."""

    @abstractmethod
    def list_dir(self, folder: str) -> list[FileInfo]:
        """Files (not folders) directly in ``folder``; ``[]`` when it does not exist."""

    @abstractmethod
    def stat(self, path: str) -> FileInfo | None:
        """The file at ``path`` or ``None`` when absent."""

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """The whole content of a file."""

    @abstractmethod
    def put_if_absent(self, local_path: str, path: str) -> None:
        """Atomically create ``path`` with the content of ``local_path``.

        Uploads to a temporary ``_``-prefixed name in the same folder, then renames it to
        ``path`` only if ``path`` does not exist. Raises :class:`FileExistsError` when it does
        (the temporary file is removed).
        """

    @abstractmethod
    def folder_exists(self, folder: str) -> bool:
        """True when ``folder`` exists."""

    @abstractmethod
    def delete_tree(self, folder: str) -> None:
        """Delete a folder and everything below it; no error when it does not exist."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete one file; no error when it does not exist."""

    def close(self) -> None:
        """Release connections and credentials; the storage is not used afterwards."""

    def set_mtime(self, path: str, mtime: float) -> None:  # pragma: no cover - optional
        """Set a file's modification time where the back end allows it."""
        raise StorageError(f"{self.describe()} cannot set modification times")

    # ----------------------------------------------------------------------------------------
    # Shared logic on top of the primitives.

    def sha256(self, path: str) -> str:
        return hashlib.sha256(self.read_bytes(path)).hexdigest()

    def remove_temp_files(self, folder: str) -> int:
        """Delete leftover temporary uploads of ours in ``folder``; returns how many."""
        removed = 0
        for info in self.list_dir(folder):
            if is_temp_name(info.name):
                self.delete(join(folder, info.name))
                removed += 1
        return removed

    def publish_one(self, item: PublishItem) -> bool:
        """Publish one staged file idempotently.

        Returns True when the file was created, False when an identical file was already in
        place (a resumed publish). A different file under the same name is a
        :class:`PublishConflict`: we never overwrite.
        """
        existing = self.stat(item.target)
        if existing is None:
            try:
                self.put_if_absent(item.local_path, item.target)
                return True
            except FileExistsError:
                existing = self.stat(item.target)
                if existing is None:  # pragma: no cover - vanished between calls
                    raise
        if existing.size == item.size and self.sha256(item.target) == item.sha256:
            return False
        raise PublishConflict(
            f"{item.target} already exists in {self.describe()} with different content "
            f"({existing.size} bytes, expected {item.size})",
            path=item.target,
            hint="a file this run did not write holds the name; move it away or re-create the "
            "table (diffcdc reload) — diffcdc never overwrites a landing file",
        )

    def publish_files(
        self,
        items: Sequence[PublishItem],
        on_published: Callable[[PublishItem, bool], None] | None = None,
    ) -> int:
        """Publish files strictly in the given order; returns how many were newly created.

        File N+1 becomes visible only after file N is in place. Back ends may override this to
        upload in parallel while keeping the renames in order.
        """
        created = 0
        for item in items:
            was_created = self.publish_one(item)
            created += int(was_created)
            if on_published is not None:
                on_published(item, was_created)
        return created

    # -- fileDetectionStrategy LastUpdateTimeFileDetection -----------------------------------

    #: Seconds a back end may spend getting one file stamped later than the previous one.
    mtime_wait = 30.0

    def put_after(self, local_path: str, path: str, after: float) -> FileInfo:
        """``put_if_absent``, with the new file's modification time strictly above ``after``.

        Generic version for back ends whose times the service sets: wait on the local clock
        until past ``after``'s whole second (HTTP Last-Modified has one-second resolution),
        create the file, and check. Back ends override it to guarantee the order before the
        file becomes visible (local: set the time first; ADLS: check the stamp of the
        temporary upload before the rename).
        """
        wait = math.floor(after) + 1 - time.time()
        if wait > 0:
            time.sleep(wait)
        self.put_if_absent(local_path, path)
        return self.stat_stamped_after(path, after)

    def stat_stamped_after(self, path: str, after: float) -> FileInfo:
        """The file's info, checked to be modified strictly later than ``after``."""
        info = self.stat(path)
        if info is None or info.mtime <= after:
            raise StorageError(
                f"{path} got modification time {info.mtime if info else None}, not after the "
                f"previous file's {after}",
                path=path,
                hint="the storage clock went backwards; files may be read out of order",
            )
        return info

    def publish_time_ordered(
        self,
        items: Sequence[PublishItem],
        after: float,
        on_published: Callable[[PublishItem, bool], None] | None = None,
    ) -> int:
        """Publish one file after the other, each modified strictly later than the one before.

        For ``LastUpdateTimeFileDetection`` (the service reads files in modification-time
        order). ``after`` is the newest time among the table's existing data files. Files
        already in place (a resumed publish) keep their time; the next one goes after it.
        """
        created = 0
        last = after
        for item in items:
            info = None
            was_created = False
            if self.stat(item.target) is None:
                try:
                    info = self.put_after(item.local_path, item.target, last)
                    was_created = True
                except FileExistsError:
                    info = None
            if info is None:
                was_created = self.publish_one(item)  # same content, or PublishConflict
                info = self.stat(item.target)
            if info is not None:
                last = max(last, info.mtime)
            created += int(was_created)
            if on_published is not None:
                on_published(item, was_created)
        return created

    def drop_folder(self, folder: str, timeout: float, poll: float = 0.5) -> None:
        """Delete a table folder and return only once it is really gone.

        The mirroring service may still be reading the folder, so a failed delete is retried
        until ``timeout`` seconds have passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            error: Exception | None = None
            try:
                self.delete_tree(folder)
            except (StorageError, OSError) as exc:
                error = exc
            if not self.folder_exists(folder):
                return
            if time.monotonic() >= deadline:
                raise TransientStorageError(
                    f"table folder {folder} still exists {timeout:.0f} s after deleting it"
                    + (f" ({error})" if error else ""),
                    path=f"{self.describe()}/{folder}",
                    hint="the mirroring service may still be reading it; run again later "
                    "(the drop is recorded and resumes)",
                )
            time.sleep(poll)


def open_landing(root: str, **options: object) -> LandingStorage:
    """Open a landing root: a local path, or (with the ADLS back end) a remote URL."""
    lowered = root.lower()
    if lowered.startswith(("abfss://", "abfs://", "https://", "http://")):
        from diffcdc.sinks.storage.adls import (
            AdlsStorage,  # imported lazily: the Azure SDK is heavy
        )

        return AdlsStorage.from_url(root, **options)
    if "://" in root:
        from diffcdc.errors import ConfigError

        raise ConfigError(
            f"unsupported landing root {root.split('?', 1)[0]!r}",  # a query may hold a SAS
            hint="use a local folder, abfss://... or https://onelake.dfs.fabric.microsoft.com/...",
        )
    from diffcdc.sinks.storage.local import LocalStorage  # imports this module

    return LocalStorage(root)
