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

Credentials, first match wins:

1. options ``credential`` (any object the SDK accepts, e.g. an azure-identity credential),
   ``account_key`` or ``sas_token`` — at most one of them; ``account_key_env`` /
   ``sas_token_env`` name an environment variable holding the key or token instead (so a
   config file can say where the secret is without holding it);
2. environment ``AZURE_STORAGE_ACCOUNT_KEY`` (or the Azure CLI's ``AZURE_STORAGE_KEY``), then
   ``AZURE_STORAGE_SAS_TOKEN`` (a SAS on the URL counts as an option);
3. ``azure.identity.DefaultAzureCredential()`` (service principal from the environment, workload
   or managed identity, Azure CLI, ...). Bearer tokens need https.

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
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.filedatalake import FileSystemClient

from diffcdc.errors import ConfigError, StorageError, TransientStorageError
from diffcdc.sinks.storage.adls_transport import (
    LOGGER,
    RETRY_STATUS,
    SCRUB,
    BoundedRetry,
    error_code,
    first_line,
    install_log_filter,
    is_tls_verify_error,
)
from diffcdc.sinks.storage.adls_url import AdlsLocation, parse_adls_url
from diffcdc.sinks.storage.base import FileInfo, LandingStorage, PublishItem, join, temp_name_for

__all__ = ["AdlsLocation", "AdlsStorage", "BoundedRetry", "parse_adls_url"]

log = logging.getLogger(LOGGER)

ENV_ACCOUNT_KEY = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY")
ENV_SAS_TOKEN = "AZURE_STORAGE_SAS_TOKEN"

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
_SECRET_OPTIONS = ("credential", "account_key", "sas_token")
#: Options naming the environment variable that holds a secret option's value.
_ENV_OPTIONS = {"account_key_env": "account_key", "sas_token_env": "sas_token"}


class AdlsStorage(LandingStorage):
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
        sdk_credential, self.credential_source, owned = self._resolve_credential(
            credential, account_key, sas_token
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
        known = {*_DEFAULTS, *_SECRET_OPTIONS, *_ENV_OPTIONS}
        unknown = set(options) - known
        if unknown:
            raise ConfigError(
                f"unknown ADLS landing option(s): {', '.join(sorted(unknown))}",
                hint="known: " + ", ".join(sorted(known)),
            )
        location, url_sas = parse_adls_url(url)
        source = None
        for env_option, target in _ENV_OPTIONS.items():
            variable = options.pop(env_option, None)
            if variable is None:
                continue
            if options.get(target):
                raise ConfigError(f"{location.display}: give {target} or {env_option}, not both")
            value = os.environ.get(str(variable))
            if not value:
                raise ConfigError(
                    f"{location.display}: environment variable {variable} ({env_option}) is "
                    "not set or empty",
                    hint=f"export {variable}=... before the run, or remove {env_option}",
                )
            options[target] = value
            source = f"{variable} ({env_option})"
        if url_sas:
            if options.get("sas_token"):
                raise ConfigError(f"{location.display}: a SAS token on the URL and in options")
            options["sas_token"] = url_sas
        storage = cls(location, **options)
        if source is not None:
            storage.credential_source = source
        return storage

    def _resolve_credential(
        self, credential: Any, account_key: str | None, sas_token: str | None
    ) -> tuple[Any, str, bool]:
        given = [n for n, v in (("credential", credential), ("account_key", account_key),
                                ("sas_token", sas_token)) if v]
        if len(given) > 1:
            raise ConfigError(
                f"{self.describe()}: give only one of {', '.join(given)}",
                hint="credential, account_key and sas_token are alternatives",
            )
        if credential:
            if isinstance(credential, str):  # the SDK takes a key or a SAS here too
                SCRUB.add(credential)
            return credential, "credential option", False
        if account_key:
            return self._key_credential(account_key), "account_key option", False
        if sas_token:
            return self._sas_credential(sas_token), "sas_token option", False
        for name in ENV_ACCOUNT_KEY:
            if os.environ.get(name):
                return self._key_credential(os.environ[name]), name, False
        if os.environ.get(ENV_SAS_TOKEN):
            return self._sas_credential(os.environ[ENV_SAS_TOKEN]), ENV_SAS_TOKEN, False
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise ConfigError(
                "azure-identity is not installed", hint="pip install azure-identity"
            ) from exc
        return DefaultAzureCredential(), "DefaultAzureCredential", True

    def _key_credential(self, key: str) -> AzureNamedKeyCredential:
        SCRUB.add(key)
        return AzureNamedKeyCredential(self.location.account_name, key)

    @staticmethod
    def _sas_credential(token: str) -> str:
        token = token.strip().lstrip("?")
        SCRUB.add(token)
        return token

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
        status = getattr(exc, "status_code", None)
        code = error_code(exc)
        where = f"{action} {path or '/'} in {self.describe()}"
        detail = SCRUB(first_line(getattr(exc, "message", None) or str(exc)))
        if status in (401, 403) or (isinstance(exc, ClientAuthenticationError) and status is None):
            return StorageError(
                f"{where}: access denied ({f'HTTP {status} ' if status else ''}{code or detail})",
                path=path,
                hint=f"check the credential (from {self.credential_source}) and its permissions",
            )
        if is_tls_verify_error(exc):
            return StorageError(
                f"{where}: the server's TLS certificate is not trusted",
                path=path,
                hint="give the CA bundle with the connection_verify option",
            )
        if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
            return TransientStorageError(
                f"{where}: network error after {self.retry_policy.retry_total} retries "
                f"({type(exc).__name__}: {detail})",
                path=path,
                hint="the service or network is unavailable; run again later",
            )
        if status in RETRY_STATUS:
            return TransientStorageError(
                f"{where}: HTTP {status} {code or detail} after "
                f"{self.retry_policy.retry_total} retries",
                path=path,
                hint="the service is busy or throttling; run again later",
            )
        return StorageError(f"{where}: HTTP {status} {code or detail}", path=path)

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

    def put_if_absent(self, local_path: str, path: str) -> None:
        temp = self._upload_temp(local_path, path)
        self._rename_into_place(temp, path)

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
            with open(local_path, "rb") as handle:
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
