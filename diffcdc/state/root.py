"""Where state lives: the state root of the small documents, and the folder of the state data.

A state root is a local folder (or a mount): every table's documents (commit log, marks,
lease, reports) and its data (state Parquet, each sink's staged output, snapshot copies) sit
together under ``<root>/<table>/``, and the run logs under ``<root>/_logs/``. That is how every
earlier diffcdc wrote it, and nothing changes for it.

A state root may also be an ADLS Gen2 / OneLake URL (``abfss://...`` or ``https://...``): the
documents then go to ``<url>/<table>/`` through :class:`~diffcdc.storage.adls.AdlsStore`
(put-if-absent and conditional replace by the service, so no lock is needed anywhere), and the
data goes to a separate folder, ``state_data``, that the Spark driver and every executor open
at the same path (state Parquet is written by executors; see docs/state.md). The URL's
credentials come from ``state_options`` (the same options as a remote landing root).

With either kind of root, ``state_data`` may also be a ``webhdfs://`` URL (HDFS without a
shared mount): Spark writes there through Hadoop, diffcdc's own code through
:class:`~diffcdc.storage.webhdfs.WebHdfsStore`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from diffcdc.errors import ConfigError
from diffcdc.storage import registry
from diffcdc.storage.base import ByteStore
from diffcdc.storage.local import LocalStore


def is_url(location: str) -> bool:
    """Whether ``location`` names a remote (ADLS Gen2 / OneLake) state root."""
    return registry.scheme(location) in registry.ADLS_SCHEMES


class StateRoot:
    """A state root: where the documents are (:attr:`location`) and the data (:attr:`data`)."""

    def __init__(
        self, location: str, data: str | None = None, options: Mapping[str, Any] | None = None,
        *, table: str | None = None, config_file: str | None = None,
    ) -> None:
        """``table`` and ``config_file``: named in the errors of settings that do not fit."""
        self.remote = is_url(location)
        if self.remote:
            if not data:
                raise ConfigError(
                    f"the state root {_shown(location)} is a URL: the state Parquet needs a "
                    "folder of its own",
                    table=table, path=config_file,
                    hint="set state_data in [diffcdc] to a folder the Spark driver and every "
                    "executor open at the same path (docs/state.md)",
                )
            if "?" in location:
                raise ConfigError(
                    "the state root URL must not carry a query string (a SAS token is a secret)",
                    table=table, path=config_file,
                    hint="use sas_token or sas_token_env in [diffcdc] state_options",
                )
            self.location = location.rstrip("/")
        else:
            if "://" in location:
                raise ConfigError(
                    f"unsupported state root {_shown(location)!r}",
                    table=table, path=config_file,
                    hint="use a local folder (or a mount), abfss://... or https://...",
                )
            if options:
                raise ConfigError(
                    "state_options are for a URL state root; this one is the local folder "
                    f"{location}",
                    table=table, path=config_file,
                    hint="remove state_options, or give state as an abfss:// or https:// URL",
                )
            self.location = os.path.abspath(location)
            if data and not registry.is_url(data) and os.path.abspath(data) != self.location:
                raise ConfigError(
                    f"state_data is a folder for a URL state root; this one is the local folder "
                    f"{self.location}, which holds its data itself",
                    table=table, path=config_file,
                    hint="remove state_data, give it as a webhdfs:// URL, or give state as an "
                    "abfss:// or https:// URL",
                )
        self.data = _data_folder(data, table, config_file) if data else self.location
        self.options = dict(options or {})
        self._remote_store: ByteStore | None = None
        self._data_store: ByteStore | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, root: StateRoot | str) -> StateRoot:
        """``root`` itself, or the local state root at the path ``root``."""
        return root if isinstance(root, StateRoot) else cls(root)

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return f"StateRoot({self.describe()!r}, data={self.data!r})"

    def describe(self) -> str:
        """The location for messages (a URL shown without secrets)."""
        return _shown(self.location) if self.remote else self.location

    def logs_base(self) -> str:
        """The local folder whose ``_logs/`` holds the run logs (:mod:`diffcdc.runlog`): the
        data folder, else a local state root, else ``$XDG_STATE_HOME/diffcdc`` (by default
        ``~/.local/state/diffcdc``) when both are URLs."""
        for folder in (self.data, self.location):
            if not registry.is_url(folder):
                return folder
        home = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        return os.path.join(home, "diffcdc")

    # -- tables ----------------------------------------------------------------------------

    def documents(self, table: str) -> ByteStore:
        """The store of ``table``'s documents (a local one may show a name reserved empty for
        a moment: see :mod:`diffcdc.storage.local`)."""
        if not self.remote:
            return LocalStore(os.path.join(self.location, table), reservations=True)
        return self._remote().at(table)

    def data_store(self) -> ByteStore:
        """The store of the data folder (a local folder, or a ``webhdfs://`` URL)."""
        with self._lock:
            if self._data_store is None:
                self._data_store = registry.open_store(self.data)
            return self._data_store

    def has_table(self, name: str) -> bool:
        """Whether the root has a folder for table ``name``."""
        if self.remote:
            return self._remote().folder_exists(name)
        return os.path.isdir(os.path.join(self.location, name))

    def table_names(self) -> list[str]:
        """Names of the folders directly under the root (tables, and diffcdc's own)."""
        if self.remote:
            return self._remote().folders("")
        try:
            return sorted(os.listdir(self.location))
        except FileNotFoundError:
            return []

    def forget(self, table: str) -> None:
        """Remove everything of ``table`` (documents and data); the caller holds its lease or
        knows no run works on it."""
        self.data_store().delete_tree(table)  # a local root's own: everything
        if self.remote:
            self._remote().delete_tree(table)
        elif self.data != self.location:
            LocalStore(self.location).delete_tree(table)

    def _remote(self) -> ByteStore:
        """One ADLS client for the whole root (shared by its tables' stores)."""
        with self._lock:
            if self._remote_store is None:
                self._remote_store = registry.open_store(self.location, **self.options)
            return self._remote_store

    def close(self) -> None:
        with self._lock:
            for store in (self._remote_store, self._data_store):
                if store is not None:
                    store.close()
            self._remote_store = self._data_store = None


def _data_folder(data: str, table: str | None = None, config_file: str | None = None) -> str:
    """``state_data`` as the state's data folder: an absolute path, or a URL of a file system
    that both Spark and diffcdc's own reads reach (:data:`diffcdc.storage.registry.DATA_SCHEMES`)."""
    if not registry.is_url(data):
        return os.path.abspath(registry.local_path(data))
    if registry.scheme(data) not in registry.DATA_SCHEMES or "?" in data:
        raise ConfigError(
            f"state_data {_shown(data)!r} is not a folder diffcdc can use: executors and the "
            "driver open the state's files by local path or by a "
            f"{' or '.join(s + '://' for s in registry.DATA_SCHEMES)} URL",
            table=table, path=config_file,
            hint="give a webhdfs://namenode:port/path URL, or mount the store on the driver "
            "and every executor (Fabric /lakehouse/default/Files/..., Databricks "
            "/Volumes/...) and give that path",
        )
    return data.rstrip("/")


def _shown(location: str) -> str:
    return location.split("?", 1)[0]
