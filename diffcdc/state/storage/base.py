"""The few operations a state root needs, so state works on any store that offers them.

A table's commit log, sink marks, reload/drop requests, reports and run lease are small
documents under the table's state folder. Every store that holds a state root (a local disk, a
FUSE or network mount without ``link()``/``flock``, ADLS Gen2 / OneLake) offers these:

* ``put_if_absent``: create a document only if its name is free (commit records, marks, a new
  lease) — the one primitive the compare-and-swap commit needs;
* ``replace_if``: replace a document only if it is still the version read before (its
  :attr:`Tagged.tag`) — how a lease is renewed and taken over by exactly one taker;
* ``put`` (replace unconditionally: reports), ``read``, ``list``, ``delete``.

Paths are relative to the storage's root and use ``/``. A storage knows nothing about tables,
versions or JSON; :class:`diffcdc.state.store.TableState` does.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tagged:
    """A document's bytes with the tag of this version of it (an ETag, or its identity)."""

    data: bytes
    tag: str
    #: Last modification, seconds since the epoch (as the store stamps it).
    mtime: float


class StateStorage(ABC):
    """A table's state folder on some store (see the module docstring)."""

    @abstractmethod
    def describe(self, path: str = "") -> str:
        """Where ``path`` is, for messages (a local path or a URL without secrets)."""

    @abstractmethod
    def read(self, path: str) -> Tagged | None:
        """The document at ``path`` with its tag, or None when there is none."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data``, complete or not at all; FileExistsError if taken.

        Some stores (a local folder without ``link()``) reserve the name with an empty file
        for a moment before the content is in place: readers treat an empty document as not
        there yet (:meth:`read_bytes` returns None for it).
        """

    @abstractmethod
    def replace_if(self, path: str, data: bytes, tag: str, *, stale_after: float) -> bool:
        """Replace ``path`` with ``data`` only if it is still the version tagged ``tag``.

        Returns False (and changes nothing) when another writer replaced it first, or is
        replacing it right now. ``stale_after`` (seconds) bounds how long a writer that died
        half-way through a replace can hold the document up (local folders only).
        """

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Write ``path`` atomically, replacing what was there (reports, requests)."""

    @abstractmethod
    def list(self, folder: str) -> list[str]:
        """Names of the files directly in ``folder``, sorted; ``[]`` when it does not exist."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete one file; no error when it does not exist."""

    def close(self) -> None:
        """Release connections; the storage is not used afterwards."""

    # -- shared logic ----------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes | None:
        """The document's bytes; None when absent or still empty (being created)."""
        found = self.read(path)
        return found.data if found is not None and found.data else None

    def read_json(self, path: str) -> Any:
        """The JSON document at ``path``, or None (absent or still empty); ValueError when it
        is not valid JSON."""
        data = self.read_bytes(path)
        return None if data is None else json.loads(data)

    def exists(self, path: str) -> bool:
        return self.read_bytes(path) is not None
