"""A store in OneLake or any ADLS Gen2 account, over ``azure-storage-file-datalake``.

Accepted roots (:func:`diffcdc.storage.registry.open_store` sends every ``abfss://``,
``abfs://``, ``https://`` and ``http://`` root here):

* ``https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone`` and
  ``https://<account>.dfs.core.windows.net/<filesystem>/<path>`` — *host style*: the host names
  the account (any host containing ``.dfs.`` or ``.blob.``; a ``.blob.`` host is switched to its
  ``.dfs.`` twin), the first path segment is the filesystem (the workspace on OneLake), the rest
  is the root inside it.
* ``abfss://<filesystem>@<host>/<path>`` (``abfs://`` too; both go over https).
* any other ``http(s)://<host[:port]>/<account>/<filesystem>/<path>`` — *path style*, the
  emulator convention (Azurite, the loopback DFS server of the tests, a proxy): the first path
  segment is the account, the second the filesystem.

A ``?<SAS token>`` on the URL is taken as the SAS credential and never shown.

Credentials (options ``credential``, ``account_key``, ``sas_token``, ``account_key_env``,
``sas_token_env``, else the environment, else ``DefaultAzureCredential``) are resolved as
:mod:`diffcdc.storage.adls_credentials` describes.

Other options: ``max_workers`` (parallel uploads of an ordered publish, default 4),
``chunk_size`` (bytes per append and per ranged read, default 4 MiB), ``retry_total``
(retries per request, default 5), ``retry_backoff`` / ``retry_backoff_max`` (seconds, default
1 and 30), ``connection_timeout`` / ``read_timeout`` (seconds, default 20 and 60),
``connection_verify`` (``True``, ``False`` or a CA bundle path), ``list_page_size`` (entries per
listing call, default: the service's 5,000).

Requests answered 408, 429 or 5xx (but 501/505), connection resets and timeouts are retried
with capped exponential backoff (``Retry-After`` honoured up to ``retry_backoff_max``); every
retry is logged on ``diffcdc.sinks.storage.adls`` at WARNING. Secrets never reach ``describe()``,
``repr()``, error messages or log records (SAS query strings are scrubbed from the SDK's and
urllib3's records too).

Every write uploads to a ``_``-prefixed temporary name beside its target and renames it into
place with a condition on the destination, so a file appears complete or not at all:
``If-None-Match: *`` for a rename without overwrite (exactly one writer of a commit record or
landing file wins), ``If-Match: <ETag read before>`` for ``replace_if`` (exactly one lease
taker wins), none for ``put`` (reports, requests).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.storage.filedatalake import FileSystemClient

from diffcdc.errors import ConfigError, StorageError
from diffcdc.storage.adls_credentials import (
    ENV_OPTIONS,
    SECRET_OPTIONS,
    fill_secret_options,
    resolve_credential,
)
from diffcdc.storage.adls_transport import (
    LOGGER,
    SCRUB,
    BoundedRetry,
    error_code,
    install_log_filter,
    storage_error,
)
from diffcdc.storage.adls_url import AdlsLocation, parse_adls_url
from diffcdc.storage.base import ByteStore, FileInfo, Tagged, join, temp_beside

__all__ = ["AdlsLocation", "AdlsStore", "BoundedRetry", "parse_adls_url"]

log = logging.getLogger(LOGGER)

_DEFAULTS: dict[str, Any] = {
    "max_workers": 4,
    "chunk_size": 4 * 1024 * 1024,
    "retry_total": 5,
    "retry_backoff": 1.0,
    "retry_backoff_max": 30.0,
    "connection_timeout": 20.0,
    "read_timeout": 60.0,
    "connection_verify": True,
    "list_page_size": None,
}


class AdlsStore(ByteStore):
    """A folder in an ADLS Gen2 filesystem or OneLake item (see the module docstring)."""

    def __init__(
        self,
        location: AdlsLocation,
        *,
        credential: Any = None,
        account_key: str | None = None,
        sas_token: str | None = None,
        max_workers: int = _DEFAULTS["max_workers"],
        chunk_size: int = _DEFAULTS["chunk_size"],
        retry_total: int = _DEFAULTS["retry_total"],
        retry_backoff: float = _DEFAULTS["retry_backoff"],
        retry_backoff_max: float = _DEFAULTS["retry_backoff_max"],
        connection_timeout: float = _DEFAULTS["connection_timeout"],
        read_timeout: float = _DEFAULTS["read_timeout"],
        connection_verify: bool | str = _DEFAULTS["connection_verify"],
        list_page_size: int | None = _DEFAULTS["list_page_size"],
    ) -> None:
        self.location = location
        self.root = location.root
        if not 1 <= int(max_workers) <= 64:
            raise ConfigError(f"max_workers must be between 1 and 64, got {max_workers}")
        if int(chunk_size) < 1:
            raise ConfigError(f"chunk_size must be positive, got {chunk_size}")
        if int(retry_total) < 0 or retry_backoff < 0 or retry_backoff_max < 0:
            raise ConfigError("retry_total, retry_backoff and retry_backoff_max must be >= 0")
        if list_page_size is not None and not 1 <= int(list_page_size) <= 5000:
            raise ConfigError(f"list_page_size must be between 1 and 5000, got {list_page_size}")
        self.max_workers = self.parallel_uploads = int(max_workers)
        self.chunk_size = int(chunk_size)
        self.list_page_size = list_page_size
        self.retry_policy = BoundedRetry(int(retry_total), float(retry_backoff), retry_backoff_max)
        sdk_credential, self.credential_source, owned = resolve_credential(
            location, credential, account_key, sas_token
        )
        self._owned_credential = sdk_credential if owned else None
        install_log_filter()
        try:
            self._fs = FileSystemClient(
                location.account_url,
                location.file_system,
                credential=sdk_credential,
                retry_policy=self.retry_policy,
                connection_timeout=connection_timeout,
                read_timeout=read_timeout,
                connection_verify=connection_verify,
                max_single_get_size=self.chunk_size,
                max_chunk_get_size=self.chunk_size,
            )
        except ValueError as exc:
            https = "HTTPS" in str(exc)
            raise ConfigError(
                f"cannot open {self.describe()}: {SCRUB(str(exc))}",
                hint="bearer tokens (azure-identity) need an https:// or abfss:// URL; over "
                "http give account_key or sas_token" if https else None,
            ) from None

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AdlsStore:
        """Open a root URL; ``options`` as in the module docstring."""
        known = {*_DEFAULTS, *SECRET_OPTIONS, *ENV_OPTIONS}
        unknown = set(options) - known
        if unknown:
            raise ConfigError(
                f"unknown ADLS landing option(s): {', '.join(sorted(unknown))}",
                hint="known: " + ", ".join(sorted(known)),
            )
        location, url_sas = parse_adls_url(url)
        source = fill_secret_options(location, options, url_sas)
        storage = cls(location, **options)
        if source is not None:
            storage.credential_source = source
        return storage

    def close(self) -> None:
        """Close the HTTP sessions (and the default credential, when we created it)."""
        self._fs.close()
        close = getattr(self._owned_credential, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> AdlsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self, path: str = "") -> str:
        return "/".join(p for p in (self.location.display, path) if p)

    def __repr__(self) -> str:
        return f"AdlsStore({self.describe()!r}, credential from {self.credential_source})"

    # -- helpers ---------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return join(self.root, path)

    def _error(self, exc: Exception, action: str, path: str) -> StorageError:
        """Map an SDK exception to ours, with no secret in the message."""
        return storage_error(
            exc, action, path, storage=self.describe(), credential_source=self.credential_source,
            retries=self.retry_policy.retry_total,
        )

    # -- reading ---------------------------------------------------------------------------

    def _entries(self, folder: str) -> list[Any]:
        """The paths directly in ``folder`` (files and folders); ``[]`` when it does not exist."""
        full = self._full(folder)
        try:
            # ItemPaged follows the x-ms-continuation tokens (the service returns <= 5,000
            # entries per call).
            return list(
                self._fs.get_paths(path=full or None, recursive=False, max_results=self.list_page_size)
            )
        except ResourceNotFoundError as exc:
            if error_code(exc) in ("FilesystemNotFound", "ContainerNotFound"):
                # A wrong filesystem (workspace) must not look like an empty folder.
                raise StorageError(
                    f"list {folder or '/'} in {self.describe()}: the filesystem "
                    f"{self.location.file_system!r} does not exist (HTTP 404 {error_code(exc)})",
                    path=folder,
                    hint="check the filesystem (OneLake: workspace) name in the URL",
                ) from None
            return []
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "list", folder) from None

    def list(self, folder: str) -> list[FileInfo]:
        out = [
            FileInfo(
                entry.name.rsplit("/", 1)[-1],
                int(entry.content_length or 0),
                entry.last_modified.timestamp(),
            )
            for entry in self._entries(folder)
            if not entry.is_directory
        ]
        return sorted(out, key=lambda f: f.name)

    def folders(self, folder: str) -> list[str]:
        return sorted(e.name.rsplit("/", 1)[-1] for e in self._entries(folder) if e.is_directory)

    def stat(self, path: str) -> FileInfo | None:
        client = self._fs.get_file_client(self._full(path))
        try:
            props = client.get_file_properties()
        except ResourceNotFoundError:
            return None
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "stat", path) from None
        if (props.metadata or {}).get("hdi_isfolder", "").lower() == "true":
            return None
        return FileInfo(path.rsplit("/", 1)[-1], int(props.size), props.last_modified.timestamp())

    def read(self, path: str) -> Tagged | None:
        client = self._fs.get_file_client(self._full(path))
        try:
            download = client.download_file()
            data = download.readall()
        except ResourceNotFoundError:
            return None
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "read", path) from None
        props = download.properties
        return Tagged(data, str(props.etag), props.last_modified.timestamp())

    def open_read(self, path: str) -> IO[bytes]:
        """The file's bytes, downloaded to a local temporary file (removed on close)."""
        found = self.read(path)
        if found is None:
            raise FileNotFoundError(f"{path} not found in {self.describe()}")
        handle = tempfile.TemporaryFile()
        handle.write(found.data)
        handle.seek(0)
        return handle

    def folder_exists(self, folder: str) -> bool:
        full = self._full(folder)
        if not full:
            try:
                return bool(self._fs.exists())
            except (AzureError, ValueError) as exc:
                raise self._error(exc, "check", "/") from None
        client = self._fs.get_directory_client(full)
        try:
            props = client.get_directory_properties()
        except ResourceNotFoundError:
            return False
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "check", folder) from None
        return (props.metadata or {}).get("hdi_isfolder", "").lower() == "true"

    # -- writing ---------------------------------------------------------------------------

    def write_temp(self, path: str, source: bytes | IO[bytes]) -> str:
        """Upload ``source`` in chunks under a fresh ``_``-prefixed name beside ``path``."""
        temp = temp_beside(path)
        self._upload(temp, path, source)
        return temp

    def write(self, path: str, data: bytes) -> None:
        self._upload(path, path, data)

    def _upload(self, temp: str, path: str, source: bytes | IO[bytes]) -> None:
        """Upload ``source`` in chunks as ``temp`` (removed again when it fails)."""
        client = self._fs.get_file_client(self._full(temp))
        offset = 0
        try:
            client.create_file()
            for chunk in _chunks(source, self.chunk_size):
                client.append_data(chunk, offset=offset, length=len(chunk), validate_content=True)
                offset += len(chunk)
            client.flush_data(offset)
        except (AzureError, ValueError) as exc:
            self.discard(temp)
            raise self._error(exc, "upload", path) from None
        except BaseException:
            self.discard(temp)
            raise
        log.debug("uploaded %s (%d bytes) as %s", path, offset, temp)

    def _rename_new(self, source: str, target: str) -> None:
        """``If-None-Match: *`` on the destination."""
        try:
            self._rename_to(source, target, {"match_condition": MatchConditions.IfMissing})
        except HttpResponseError as exc:
            code = error_code(exc) or ""
            if exc.status_code in (409, 412) and code in ("PathAlreadyExists", "ConditionNotMet"):
                raise FileExistsError(f"{target} already exists in {self.describe()}") from None
            if exc.status_code == 404 and self.stat(target) is not None:
                # an earlier attempt of this rename landed but its answer was lost
                raise FileExistsError(f"{target} already exists in {self.describe()}") from None
            raise self._error(exc, "rename", target) from None
        log.debug("published %s", target)

    def _replace(self, source: str, target: str) -> None:
        try:
            self._rename_to(source, target, {})
        except HttpResponseError as exc:
            raise self._error(exc, "rename", target) from None

    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        """``If-Match`` on the rename's destination: the service decides (``stale_after`` is
        not needed: a rename is one request)."""
        temp = self.write_temp(path, data)
        condition = {"etag": tag, "match_condition": MatchConditions.IfNotModified}
        try:
            self._rename_to(temp, path, condition)
        except HttpResponseError as exc:
            self.discard(temp)
            if exc.status_code in (404, 409, 412) and (
                error_code(exc) or ""
            ) in ("ConditionNotMet", "PathNotFound", "SourcePathNotFound", ""):
                return False
            raise self._error(exc, "rename", path) from None
        except BaseException:
            self.discard(temp)
            raise
        return True

    def _rename_to(self, source: str, target: str, condition: dict[str, Any]) -> None:
        """Rename ``source`` to ``target`` under ``condition``; HttpResponseError as raised."""
        client = self._fs.get_file_client(self._full(source))
        try:
            client.rename_file(f"{self.location.file_system}/{self._full(target)}", **condition)
        except HttpResponseError:
            raise
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "rename", target) from None

    def makedirs(self, folder: str, *, exist_ok: bool = True) -> None:
        """Create ``folder`` (a real folder in a hierarchical namespace)."""
        if not exist_ok and self.folder_exists(folder):
            raise FileExistsError(self.describe(folder))
        try:
            self._fs.get_directory_client(self._full(folder)).create_directory()
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "create", folder) from None

    def delete_tree(self, folder: str) -> None:
        full = self._full(folder)
        if not full:
            raise StorageError(f"refusing to delete the whole filesystem of {self.describe()}")
        client = self._fs.get_directory_client(full)
        try:
            client.delete_directory()
        except ResourceNotFoundError:
            pass
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "delete", folder) from None

    def delete(self, path: str) -> None:
        try:
            self._fs.get_file_client(self._full(path)).delete_file()
        except ResourceNotFoundError:
            pass
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "delete", path) from None


def _chunks(source: bytes | IO[bytes], size: int) -> Iterator[bytes]:
    if isinstance(source, bytes):
        yield from (source[i:i + size] for i in range(0, len(source), size))
    else:
        yield from iter(lambda: source.read(size), b"")
