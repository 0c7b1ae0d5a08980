"""How an ADLS Gen2 / OneLake landing storage makes files appear: upload, then atomic rename.

:class:`AdlsPublishing` is the writing half of
:class:`~diffcdc.sinks.storage.adls.AdlsStorage`: a file is uploaded in chunks under a
``_``-prefixed temporary name beside its target and renamed into place only if the target does
not exist (``If-None-Match: *``). On top of that: ordered publishing with parallel uploads, and
publishing with strictly increasing Last-Modified times (``LastUpdateTimeFileDetection``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError
from azure.storage.filedatalake import FileSystemClient

from diffcdc import datafs
from diffcdc.errors import StorageError, TransientStorageError
from diffcdc.sinks.storage.base import FileInfo, LandingStorage, PublishItem, join, temp_name_for
from diffcdc.storage.adls_transport import LOGGER, error_code
from diffcdc.storage.adls_url import AdlsLocation

log = logging.getLogger(LOGGER)


class AdlsPublishing(LandingStorage):
    """Upload, atomic rename and ordered publishing for :class:`~diffcdc.sinks.storage.adls.AdlsStorage`."""

    # Set up by AdlsStorage.__init__.
    location: AdlsLocation
    max_workers: int
    chunk_size: int
    _fs: FileSystemClient

    if TYPE_CHECKING:  # implemented by AdlsStorage

        def _full(self, path: str) -> str: ...

        def _error(self, exc: Exception, action: str, path: str) -> StorageError: ...

        def _delete_quietly(self, full: str) -> None: ...

    def put_if_absent(self, local_path: str, path: str) -> None:
        temp = self._upload_temp(local_path, path)
        self._rename_into_place(temp, path)

    # -- upload and atomic rename ----------------------------------------------------------

    def _upload_temp(self, local_path: str, path: str) -> str:
        """Upload ``local_path`` under a fresh ``_``-prefixed name beside ``path``."""
        full = self._full(path)
        folder, _, name = full.rpartition("/")
        temp = join(folder, temp_name_for(name))
        client = self._fs.get_file_client(temp)
        try:
            client.create_file()
            offset = 0
            with datafs.open_read(local_path) as handle:
                for chunk in iter(lambda: handle.read(self.chunk_size), b""):
                    client.append_data(chunk, offset=offset, length=len(chunk),
                                       validate_content=True)
                    offset += len(chunk)
            client.flush_data(offset)
        except (AzureError, ValueError) as exc:
            self._delete_quietly(temp)
            raise self._error(exc, "upload", path) from None
        except BaseException:
            self._delete_quietly(temp)
            raise
        log.debug("uploaded %s (%d bytes) as %s", path, offset, temp)
        return temp

    def _rename_into_place(self, temp: str, path: str) -> None:
        """Rename ``temp`` to ``path`` only if ``path`` does not exist (``If-None-Match: *``)."""
        full = self._full(path)
        client = self._fs.get_file_client(temp)
        try:
            client.rename_file(
                f"{self.location.file_system}/{full}", match_condition=MatchConditions.IfMissing
            )
        except HttpResponseError as exc:
            code = error_code(exc) or ""
            if exc.status_code in (409, 412) and code in ("PathAlreadyExists", "ConditionNotMet"):
                self._delete_quietly(temp)
                raise FileExistsError(f"{path} already exists in {self.describe()}") from None
            if exc.status_code == 404 and self.stat(path) is not None:
                # An earlier attempt of this rename landed but its answer was lost: the next
                # step (publish_one) compares the content and counts it as published.
                self._delete_quietly(temp)
                raise FileExistsError(f"{path} already exists in {self.describe()}") from None
            self._delete_quietly(temp)
            raise self._error(exc, "rename", path) from None
        except (AzureError, ValueError) as exc:
            self._delete_quietly(temp)
            raise self._error(exc, "rename", path) from None
        log.debug("published %s", path)

    # -- ordered publish with parallel uploads ---------------------------------------------

    def publish_files(
        self,
        items: Sequence[PublishItem],
        on_published: Callable[[PublishItem, bool], None] | None = None,
    ) -> int:
        """Upload up to ``max_workers`` files at once; rename them strictly in order.

        File N+1 is renamed only after file N is in place. On an error, uploads not yet
        renamed are abandoned and their temporary files removed (best effort).
        """
        items = list(items)
        if self.max_workers == 1 or len(items) <= 1:
            return super().publish_files(items, on_published)
        created = 0
        window = self.max_workers * 2  # uploads allowed to run ahead of the rename cursor
        pending: dict[int, Future[str | None]] = {}
        with ThreadPoolExecutor(self.max_workers, thread_name_prefix="diffcdc-adls") as pool:
            submitted = 0
            try:
                for index, item in enumerate(items):
                    while submitted < len(items) and submitted < index + window:
                        pending[submitted] = pool.submit(self._prepare, items[submitted])
                        submitted += 1
                    prepared = pending.pop(index).result()
                    was_created = self._finish(item, prepared)
                    created += int(was_created)
                    if on_published is not None:
                        on_published(item, was_created)
            except BaseException:
                self._abandon(pending)
                raise
        return created

    def _prepare(self, item: PublishItem) -> str | None:
        """Upload one file to its temporary name; None when the target already exists."""
        if self.stat(item.target) is not None:
            return None
        return self._upload_temp(item.local_path, item.target)

    def _finish(self, item: PublishItem, temp: str | None) -> bool:
        if temp is None:
            return self.publish_one(item)  # compares content: False or PublishConflict
        try:
            self._rename_into_place(temp, item.target)
            return True
        except FileExistsError:
            return self.publish_one(item)

    def _abandon(self, pending: dict[int, Future[str | None]]) -> None:
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
                self._delete_quietly(temp)

    # -- LastUpdateTimeFileDetection -------------------------------------------------------

    def put_after(self, local_path: str, path: str, after: float) -> FileInfo:
        """Create ``path`` so that its Last-Modified is strictly greater than ``after``.

        The service stamps a file when its upload is flushed (one-second resolution) and the
        stamp cannot be set by a client. So the file is uploaded under its temporary name
        first; only when the service's stamp of that upload is later than ``after`` is it
        renamed into place (a rename never makes the time go backwards). An upload stamped too
        early is deleted and repeated a moment later, invisible to the mirroring service.
        """
        deadline = time.monotonic() + self.mtime_wait
        while True:
            temp = self._upload_temp(local_path, path)
            try:
                props = self._fs.get_file_client(temp).get_file_properties()
            except (AzureError, ValueError) as exc:
                self._delete_quietly(temp)
                raise self._error(exc, "stat", path) from None
            if props.last_modified.timestamp() > after:
                self._rename_into_place(temp, path)
                return self.stat_stamped_after(path, after)
            self._delete_quietly(temp)
            if time.monotonic() >= deadline:
                raise TransientStorageError(
                    f"{path}: the service kept stamping uploads at or before {after} for "
                    f"{self.mtime_wait:.0f} s",
                    path=path,
                    hint="the service clock is behind; run again later",
                )
            time.sleep(min(1.0, max(0.05, int(after) + 1 - time.time())))
