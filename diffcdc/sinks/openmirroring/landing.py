"""How files appear in a landing zone: in order, never overwritten, each complete at once.

The landing root is a byte store (:mod:`diffcdc.storage`: a local or mounted folder, or ADLS
Gen2 / OneLake). A file is written under a ``_``-prefixed temporary name in its folder and
renamed to its final name with a condition that fails if the target exists; the mirroring
service ignores ``_``-prefixed names, so it never sees a partial file. On top of that, what
the Open Mirroring contract needs:

* :func:`publish_files`: strictly in the given order (file N+1 appears only after file N),
  uploads running ahead in parallel where the store allows (ADLS ``max_workers``);
* :func:`publish_time_ordered`: each file modified strictly later than the one before
  (``LastUpdateTimeFileDetection``);
* :func:`drop_folder`: delete a table folder and return only once it is gone;
* :func:`remove_temp_files`: leftovers of a writer killed mid-upload.
"""

from __future__ import annotations

import contextvars
import hashlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from diffcdc.errors import ConfigError, PublishConflict, StorageError, TransientStorageError
from diffcdc.sinks.openmirroring.contract import alone_hint
from diffcdc.storage import paths
from diffcdc.storage.base import ByteStore, FileInfo, is_temp_name, join
from diffcdc.storage.registry import ADLS_SCHEMES, open_store, scheme

#: Seconds a store may spend getting one file stamped later than the previous one.
MTIME_WAIT = 30.0


@dataclass(frozen=True)
class PublishItem:
    """A staged file (a local path or a state data URL) and the landing path it must appear
    under."""

    local_path: str
    target: str  #: relative to the landing root
    sha256: str
    size: int


def open_landing(root: str, **options: object) -> ByteStore:
    """Open a landing root: a local path, or an ADLS Gen2 / OneLake URL."""
    if scheme(root) not in ("", *ADLS_SCHEMES):
        raise ConfigError(
            f"unsupported landing root {root.split('?', 1)[0]!r}",  # a query may hold a SAS
            hint="use a local folder, abfss://... or https://onelake.dfs.fabric.microsoft.com/...",
        )
    return open_store(root, **options)


def file_sha256(path: str) -> str:
    """The SHA-256 of a staged file (a local path or a state data URL)."""
    digest = hashlib.sha256()
    with paths.open_read(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_file(store: ByteStore, path: str) -> bytes:
    """The whole content of a landing file; FileNotFoundError when there is none."""
    found = store.read(path)
    if found is None:
        raise FileNotFoundError(f"{path} not found in {store.describe()}")
    return found.data


def put_staged(store: ByteStore, local_path: str, path: str) -> None:
    """Create ``path`` with the content of the staged file ``local_path``; FileExistsError
    when it exists."""
    with paths.open_read(local_path) as handle:
        store.put_file_if_absent(handle, path)


def _upload(store: ByteStore, local_path: str, path: str) -> str:
    with paths.open_read(local_path) as handle:
        return store.write_temp(path, handle)


def remove_temp_files(store: ByteStore, folder: str) -> int:
    """Delete leftover temporary uploads of ours in ``folder``; returns how many."""
    removed = 0
    for info in store.list(folder):
        if is_temp_name(info.name):
            store.delete(join(folder, info.name))
            removed += 1
    return removed


def publish_one(store: ByteStore, item: PublishItem, *, alone: str | None = None) -> bool:
    """Publish one staged file idempotently.

    Returns True when the file was created, False when an identical file was already in
    place (a resumed publish). A different file under the same name is a
    :class:`PublishConflict`: we never overwrite (``alone``: the command that publishes a
    full image to this sink alone, named in its hint).
    """
    existing = store.stat(item.target)
    if existing is None:
        try:
            put_staged(store, item.local_path, item.target)
            return True
        except FileExistsError:
            existing = store.stat(item.target)
            if existing is None:  # pragma: no cover - vanished between calls
                raise
    if existing.size == item.size and _sha256(store, item.target) == item.sha256:
        return False
    raise PublishConflict(
        f"{item.target} already exists in {store.describe()} with different content "
        f"({existing.size} bytes, expected {item.size})",
        path=item.target,
        hint=alone_hint("a file this run did not write holds the name; move it away or "
                        "re-create the table (diffcdc reload) — diffcdc never overwrites a "
                        "landing file", alone),
    )


def _sha256(store: ByteStore, path: str) -> str:
    return hashlib.sha256(read_file(store, path)).hexdigest()


def publish_files(
    store: ByteStore,
    items: Sequence[PublishItem],
    on_published: Callable[[PublishItem, bool], None] | None = None,
    *,
    alone: str | None = None,
) -> int:
    """Publish files strictly in the given order; returns how many were newly created.

    File N+1 is renamed into place only after file N is. Up to ``store.parallel_uploads``
    files are uploaded at once ahead of the renames; on an error, uploads not yet renamed are
    abandoned and their temporary files removed (best effort).
    """
    items = list(items)
    if store.parallel_uploads == 1 or len(items) <= 1:
        created = 0
        for item in items:
            was_created = publish_one(store, item, alone=alone)
            created += int(was_created)
            if on_published is not None:
                on_published(item, was_created)
        return created
    created = 0
    window = store.parallel_uploads * 2  # uploads allowed to run ahead of the rename cursor
    pending: dict[int, Future[str | None]] = {}
    with ThreadPoolExecutor(store.parallel_uploads, thread_name_prefix="diffcdc-upload") as pool:
        submitted = 0
        try:
            for index, item in enumerate(items):
                while submitted < len(items) and submitted < index + window:
                    # the upload thread builds its errors in this context (they name the table)
                    pending[submitted] = pool.submit(contextvars.copy_context().run,
                                                     _prepare, store, items[submitted])
                    submitted += 1
                was_created = _finish(store, item, pending.pop(index).result(), alone)
                created += int(was_created)
                if on_published is not None:
                    on_published(item, was_created)
        except BaseException:
            _abandon(store, pending)
            raise
    return created


def _prepare(store: ByteStore, item: PublishItem) -> str | None:
    """Upload one file to its temporary name; None when the target already exists."""
    if store.stat(item.target) is not None:
        return None
    return _upload(store, item.local_path, item.target)


def _finish(store: ByteStore, item: PublishItem, temp: str | None, alone: str | None) -> bool:
    if temp is None:
        return publish_one(store, item, alone=alone)  # compares content: False or PublishConflict
    try:
        store.rename(temp, item.target)
        return True
    except FileExistsError:
        return publish_one(store, item, alone=alone)


def _abandon(store: ByteStore, pending: dict[int, Future[str | None]]) -> None:
    for future in pending.values():
        future.cancel()
    for future in pending.values():
        if future.cancelled():
            continue
        try:
            temp = future.result()
        except BaseException:  # already reported by the failing item or irrelevant now
            continue
        if temp:
            store.discard(temp)


# -- fileDetectionStrategy LastUpdateTimeFileDetection ---------------------------------------


def put_after(store: ByteStore, local_path: str, path: str, after: float) -> FileInfo:
    """Create ``path`` so that its modification time is strictly greater than ``after``.

    The file is uploaded under its temporary name first; a store that sets times (a local
    folder) stamps it 1 ms after ``after`` at least, one whose service stamps uploads (ADLS:
    one-second resolution, not settable) is checked: only an upload stamped later than
    ``after`` is renamed into place (a rename never makes the time go backwards). One stamped
    too early is deleted and repeated a moment later, invisible to the mirroring service.
    """
    deadline = time.monotonic() + MTIME_WAIT
    while True:
        temp = _upload(store, local_path, path)
        stamp = _stamp(store, temp, path)
        if stamp <= after + 0.001 and store.set_mtime(temp, after + 0.001):
            stamp = _stamp(store, temp, path)
        if stamp > after:
            store.rename(temp, path)
            return stat_stamped_after(store, path, after)
        store.discard(temp)
        if time.monotonic() >= deadline:
            raise TransientStorageError(
                f"{path}: the service kept stamping uploads at or before {after} for "
                f"{MTIME_WAIT:.0f} s",
                path=path,
                hint="the service clock is behind; run again later",
            )
        time.sleep(min(1.0, max(0.05, int(after) + 1 - time.time())))


def _stamp(store: ByteStore, temp: str, path: str) -> float:
    info = store.stat(temp)
    if info is None:
        raise StorageError(f"{path}: its upload {temp} vanished from {store.describe()}",
                           path=path, hint="run again")
    return info.mtime


def stat_stamped_after(store: ByteStore, path: str, after: float) -> FileInfo:
    """The file's info, checked to be modified strictly later than ``after``."""
    info = store.stat(path)
    if info is None or info.mtime <= after:
        raise StorageError(
            f"{path} got modification time {info.mtime if info else None}, not after the "
            f"previous file's {after}",
            path=path,
            hint="the storage clock went backwards; files may be read out of order",
        )
    return info


def publish_time_ordered(
    store: ByteStore,
    items: Sequence[PublishItem],
    after: float,
    on_published: Callable[[PublishItem, bool], None] | None = None,
    *,
    alone: str | None = None,
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
        if store.stat(item.target) is None:
            try:
                info = put_after(store, item.local_path, item.target, last)
                was_created = True
            except FileExistsError:
                info = None
        if info is None:
            was_created = publish_one(store, item, alone=alone)  # same content, or conflict
            info = store.stat(item.target)
        if info is not None:
            last = max(last, info.mtime)
        created += int(was_created)
        if on_published is not None:
            on_published(item, was_created)
    return created


def drop_folder(store: ByteStore, folder: str, timeout: float, poll: float = 0.5) -> None:
    """Delete a table folder and return only once it is really gone.

    The mirroring service may still be reading the folder, so a failed delete is retried
    until ``timeout`` seconds have passed; on a file system mounted read-only (no wait helps)
    it fails at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        error: Exception | None = None
        try:
            store.delete_tree(folder)
        except (StorageError, OSError) as exc:
            error = exc
        if not store.folder_exists(folder):
            return
        if store.read_only(folder):
            raise StorageError(
                f"table folder {folder} cannot be deleted: the file system is read-only",
                path=store.describe(folder),
                hint="make it writable again (remount it read-write), then run again (the "
                "drop is recorded and resumes)",
            )
        if time.monotonic() >= deadline:
            raise TransientStorageError(
                f"table folder {folder} still exists {timeout:.0f} s after deleting it"
                + (f" ({error})" if error else ""),
                path=f"{store.describe()}/{folder}",
                hint="the mirroring service may still be reading it; run again later "
                "(the drop is recorded and resumes)",
            )
        time.sleep(poll)

