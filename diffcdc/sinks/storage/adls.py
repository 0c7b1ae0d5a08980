"""A landing zone in OneLake or any ADLS Gen2 account, over ``azure-storage-file-datalake``.

Accepted roots (``open_landing`` sends every ``abfss://``, ``abfs://``, ``https://`` and
``http://`` root here):

* ``https://onelake.dfs.fabric.microsoft.com/<workspace>/<item>/Files/LandingZone`` and
  ``https://<account>.dfs.core.windows.net/<filesystem>/<path>`` — *host style*: the host names
  the account (any host containing ``.dfs.`` or ``.blob.``; a ``.blob.`` host is switched to its
  ``.dfs.`` twin), the first path segment is the filesystem (the workspace on OneLake), the rest
  is the landing root inside it.
* ``abfss://<filesystem>@<host>/<path>`` (``abfs://`` too; both go over https).
* any other ``http(s)://<host[:port]>/<account>/<filesystem>/<path>`` — *path style*, the
  emulator convention (Azurite, the loopback DFS server of the tests, a proxy): the first path
  segment is the account, the second the filesystem.

A ``?<SAS token>`` on the URL is taken as the SAS credential and never shown.

Credentials (options ``credential``, ``account_key``, ``sas_token``, ``account_key_env``,
``sas_token_env``, else the environment, else ``DefaultAzureCredential``) are resolved as
:mod:`diffcdc.storage.adls_credentials` describes.

Other options: ``max_workers`` (parallel uploads in :meth:`AdlsStorage.publish_files`, default
4), ``chunk_size`` (bytes per append and per ranged read, default 4 MiB), ``retry_total``
(retries per request, default 5), ``retry_backoff`` / ``retry_backoff_max`` (seconds, default
1 and 30), ``connection_timeout`` / ``read_timeout`` (seconds, default 20 and 60),
``connection_verify`` (``True``, ``False`` or a CA bundle path), ``list_page_size`` (entries per
listing call, default: the service's 5,000).

Requests answered 408, 429 or 5xx (but 501/505), connection resets and timeouts are retried
with capped exponential backoff (``Retry-After`` honoured up to ``retry_backoff_max``); every
retry is logged on ``diffcdc.sinks.storage.adls`` at WARNING. Secrets never reach ``describe()``,
``repr()``, error messages or log records (SAS query strings are scrubbed from the SDK's and
urllib3's records too).

Uploads, the atomic rename and ordered publishing are in
:mod:`diffcdc.sinks.storage.adls_publish`; this module opens the storage and reads, lists and
deletes.
"""

from __future__ import annotations

import logging
from typing import Any

from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.storage.filedatalake import FileSystemClient

from diffcdc.errors import ConfigError, StorageError
from diffcdc.sinks.storage.adls_publish import AdlsPublishing
from diffcdc.sinks.storage.base import FileInfo, join
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

__all__ = ["AdlsLocation", "AdlsStorage", "BoundedRetry", "parse_adls_url"]

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


class AdlsStorage(AdlsPublishing):
    """A landing root in an ADLS Gen2 filesystem or OneLake item (see the module docstring)."""

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
        self.max_workers = int(max_workers)
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
    def from_url(cls, url: str, **options: Any) -> AdlsStorage:
        """Open a landing root URL; ``options`` as in the module docstring."""
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

    def __enter__(self) -> AdlsStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        return self.location.display

    def __repr__(self) -> str:
        return f"AdlsStorage({self.describe()!r}, credential from {self.credential_source})"

    # -- helpers ---------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return join(self.root, path)

    def _error(self, exc: Exception, action: str, path: str) -> StorageError:
        """Map an SDK exception to ours, with no secret in the message."""
        return storage_error(
            exc, action, path, storage=self.describe(), credential_source=self.credential_source,
            retries=self.retry_policy.retry_total,
        )

    # -- LandingStorage primitives ---------------------------------------------------------

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

    def list_dir(self, folder: str) -> list[FileInfo]:
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

    def list_folders(self, folder: str) -> list[str]:
        """Names of the folders directly in ``folder`` (a remote state root's tables)."""
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

    def read_bytes(self, path: str) -> bytes:
        client = self._fs.get_file_client(self._full(path))
        try:
            return client.download_file().readall()
        except ResourceNotFoundError:
            raise FileNotFoundError(f"{path} not found in {self.describe()}") from None
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "read", path) from None

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
        self._delete_full(self._full(path), path)

    def _delete_full(self, full: str, shown: str) -> None:
        try:
            self._fs.get_file_client(full).delete_file()
        except ResourceNotFoundError:
            pass
        except (AzureError, ValueError) as exc:
            raise self._error(exc, "delete", shown) from None

    def _delete_quietly(self, full: str) -> None:
        try:
            self._delete_full(full, full)
        except StorageError as err:  # the next run's remove_temp_files gets it
            log.warning("could not remove temporary file %s: %s", full, err)
