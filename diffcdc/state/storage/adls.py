"""A table's state documents in ADLS Gen2 / OneLake, over the landing zone's ADLS transport.

Same URL forms, credentials, retries and secret scrubbing as an ADLS landing root
(:mod:`diffcdc.sinks.storage.adls`). Every write uploads to a ``_``-prefixed temporary name and
renames it into place with a condition on the destination, so a document appears complete or
not at all:

* ``put_if_absent``: ``If-None-Match: *`` (exactly one writer of a commit record wins);
* ``replace_if``: ``If-Match: <ETag read before>`` (exactly one lease taker wins);
* ``put``: unconditional rename (reports, requests).
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

from diffcdc.sinks.storage.adls import AdlsStorage
from diffcdc.sinks.storage.adls_transport import error_code
from diffcdc.sinks.storage.base import join
from diffcdc.state.storage.base import StateStorage, Tagged

log = logging.getLogger("diffcdc")


class AdlsStateStorage(StateStorage):
    """The folder ``prefix`` (a table's state folder) below an ADLS root."""

    def __init__(self, remote: AdlsStorage, prefix: str) -> None:
        self.remote = remote
        self.prefix = prefix.strip("/")

    @classmethod
    def from_url(cls, root: str, table: str, **options: Any) -> AdlsStateStorage:
        return cls(AdlsStorage.from_url(root, **options), table)

    def describe(self, path: str = "") -> str:
        return "/".join(p for p in (self.remote.describe(), self.prefix, path) if p)

    def _rel(self, path: str) -> str:
        return join(self.prefix, path)

    def close(self) -> None:
        self.remote.close()

    # -- reading ---------------------------------------------------------------------------

    def read(self, path: str) -> Tagged | None:
        client = self.remote._fs.get_file_client(self.remote._full(self._rel(path)))
        try:
            download = client.download_file()
            data = download.readall()
        except ResourceNotFoundError:
            return None
        except (AzureError, ValueError) as exc:
            raise self.remote._error(exc, "read", self._rel(path)) from None
        props = download.properties
        return Tagged(data, str(props.etag), props.last_modified.timestamp())

    def list(self, folder: str) -> list[str]:
        return [f.name for f in self.remote.list_dir(self._rel(folder))]

    # -- writing ---------------------------------------------------------------------------

    def _upload(self, path: str, data: bytes) -> str:
        """Upload ``data`` to a temporary name beside ``path``; its full name."""
        fd, local = tempfile.mkstemp(prefix="diffcdc-state-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            return self.remote._upload_temp(local, self._rel(path))
        finally:
            os.unlink(local)

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` unless it exists (``If-None-Match: *`` on the rename).

        Commit state unknown: when a rename lands but its answer is lost, the client's retry
        finds ``path`` there. A document holding exactly ``data`` is this writer's own (every
        document names its run and time), so the put succeeded; anything else is a conflict.
        """
        try:
            self.remote._rename_into_place(self._upload(path, data), self._rel(path))
        except FileExistsError:
            found = self.read(path)
            if found is None or found.data != data:
                raise
            log.info("%s: the answer to its creation was lost; it holds what this run wrote",
                     self.describe(path))

    def put(self, path: str, data: bytes) -> None:
        self._rename(self._upload(path, data), path, {})

    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        """``If-Match`` on the rename's destination: the service decides (``stale_after`` is
        not needed: a rename is one request)."""
        condition = {"etag": tag, "match_condition": MatchConditions.IfNotModified}
        return self._rename(self._upload(path, data), path, condition)

    def _rename(self, temp: str, path: str, condition: dict[str, Any]) -> bool:
        full = self.remote._full(self._rel(path))
        client = self.remote._fs.get_file_client(temp)
        try:
            client.rename_file(f"{self.remote.location.file_system}/{full}", **condition)
        except HttpResponseError as exc:
            self.remote._delete_quietly(temp)
            if condition and exc.status_code in (404, 409, 412) and (
                error_code(exc) or ""
            ) in ("ConditionNotMet", "PathNotFound", "SourcePathNotFound", ""):
                return False
            raise self.remote._error(exc, "rename", self._rel(path)) from None
        except (AzureError, ValueError) as exc:
            self.remote._delete_quietly(temp)
            raise self.remote._error(exc, "rename", self._rel(path)) from None
        return True

    def delete(self, path: str) -> None:
        self.remote.delete(self._rel(path))
