"""Versioned per-table state with a commit log moved by compare-and-swap.

Layout under ``<state root>/<table>/``::

    log/00000000000000000007.json                 commit record of version 7 (immutable)
    log/00000000000000000007.published.<sink>.json  written once sink <sink> published version 7
    log/00000000000000000007.state.json           where version 7's state lives since a repair
                                                  (``diffcdc repair``; the record stays as is)
    versions/00000000000000000007-<run>/          state Parquet (``state/``) + each sink's
                                                  staged output (``sinks/<sink>/``)
    reports/<run id>.json                    one report per run (passed or failed;
                                             :mod:`diffcdc.state.reports`)
    reload.json, drop.json                   a pending reload or drop request
                                             (:mod:`diffcdc.state.requests`)
    lease.json                               the run lease while a run works on the table
                                             (:mod:`diffcdc.state.lease`; ``.lock`` is the
                                             flock file of diffcdc before leases)

Every small document goes through one :class:`~diffcdc.storage.base.ByteStore`, so
the store needs nothing but create-if-absent, conditional replace, rename-free reads and lists
(no ``link()``, no ``flock``). A commit record is created with ``put_if_absent``, so of two runs
that both computed version N+1, exactly one commits; the other gets
:class:`ConcurrentRunError` and changes nothing. Once a record exists its batch is
decided: a later run publishes it (idempotently) before doing anything new, and never
recomputes it. The head of the table is the highest committed version.

Version folders beyond the retention are removed by
:func:`diffcdc.state.prune.prune_versions`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from diffcdc.errors import ConcurrentRunError, StateError
from diffcdc.state.commit import LEGACY_SINK_ID, READABLE_FORMATS, STATE_FORMAT, CommitRecord
from diffcdc.state.integrity import StateManifest
from diffcdc.state.lease import DEFAULT_LEASE_SECONDS, Lease
from diffcdc.state.legacy_lock import legacy_flock
from diffcdc.state.records import (
    Commit,
    SinkMarks,
    encode_json,
    new_run_id,
    now_iso,
)
from diffcdc.state.reports import TableReports
from diffcdc.state.requests import TableRequests
from diffcdc.state.root import StateRoot
from diffcdc.storage import paths
from diffcdc.storage.base import ByteStore

__all__ = ["Commit", "SinkMarks", "TableState", "new_run_id", "now_iso"]

_LOG_RE = re.compile(r"^(\d{20})\.json$")
_MARK_RE = re.compile(r"^(\d{20})\.published(?:\.(.+))?\.json$")
_REPAIR_RE = re.compile(r"^(\d{20})\.state\.json$")


class TableState:
    """The state store of one table.

    ``storage`` holds the table's small documents (log, marks, requests, reports, lease); by
    default the table's folder under the state root (a local folder or a URL, see
    :mod:`diffcdc.state.root`). The state Parquet of each version lives under :attr:`dir` (the
    table's folder under the root's data folder) and is written and read by Spark.
    """

    def __init__(
        self, root: StateRoot | str, table: str, storage: ByteStore | None = None
    ) -> None:
        self.location = StateRoot.of(root)
        self.root = self.location.data
        self.table = table
        self.dir = paths.join(self.root, table)  # the table's data: versions/, snapshots/
        self.versions_dir = paths.join(self.dir, "versions")
        self.storage = storage or self.location.documents(table)
        self.reports = TableReports(self.storage)
        self.requests = TableRequests(self.storage, self.commits)
        self._lease: Lease | None = None
        #: What :meth:`commits` has read so far: records by log name, marks found complete.
        self._records: dict[str, CommitRecord] = {}
        self._marks: set[str] = set()

    # -- the run lease ---------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(
        self, run_id: str | None = None, lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Iterator[Lease]:
        """Hold the table's run lease; a second run of the table fails at once, naming the
        holder. A holder killed with ``kill -9`` is taken over once its lease has expired (at
        once on the same machine). Commits are still compare-and-swap: the lease only turns a
        guaranteed later failure into an immediate, clear one.
        """
        lease = Lease(self.storage, self.table, run_id or new_run_id(), lease_seconds)
        with legacy_flock(self.dir, self.table):
            lease.acquire()
            try:
                lease.start_heartbeat()
                self._lease = lease
                self.remove_abandoned()
                yield lease
            finally:
                self._lease = None
                lease.release()

    def remove_abandoned(self) -> list[str]:
        """Remove empty reservations in the log: a writer killed between reserving a name and
        putting its content there (only ever called by the lease holder)."""
        removed = []
        for name in self.storage.names("log"):
            found = self.storage.read(f"log/{name}")
            if found is not None and not found.data and not name.startswith("."):
                self.storage.delete(f"log/{name}")
                removed.append(name)
        return removed

    # -- reading ---------------------------------------------------------------------------

    def commits(self) -> list[Commit]:
        """Every committed version, oldest first.

        Commit records and publish marks never change once written, so this instance parses
        each one once: later calls list the log and read only what is new (a run asks several
        times, and a table's log grows by a version every night). A repair's pointer file
        (``<v>.state.json``) may be rewritten, so it is read whenever the log lists it.
        """
        names = self.storage.names("log")
        listed = set(names)
        marks: dict[str, set[str]] = {}
        for name in names:
            mark = _MARK_RE.match(name)
            if mark and (name in self._marks or self.storage.exists(f"log/{name}")):
                self._marks.add(name)
                # format 1 wrote ``<v>.published.json``: the landing zone's mark
                marks.setdefault(mark.group(1), set()).add(mark.group(2) or LEGACY_SINK_ID)
        commits = []
        for name in names:
            match = _LOG_RE.match(name)
            if not match:
                continue
            parsed = self._records.get(name) or self._read_record(name)
            if parsed is None:
                continue  # a name reserved a moment ago: not committed (yet)
            self._records[name] = parsed
            if f"{match.group(1)}.state.json" in listed:
                repaired = self._repaired_state(match.group(1))
                if repaired is not None:
                    parsed = replace(parsed, state_path=repaired[0], state_manifest=repaired[1],
                                     state_parent=None)  # a rebuilt state is whole
            commits.append(Commit(parsed, frozenset(marks.get(match.group(1), ()))))
        return commits

    def _read_record(self, name: str) -> CommitRecord | None:
        """The commit record ``log/<name>``; None while its name is only reserved."""
        path = self.storage.describe(f"log/{name}")
        try:
            record = self.storage.read_json(f"log/{name}")
        except (OSError, ValueError) as exc:
            raise StateError(
                f"commit record is unreadable: {exc}",
                table=self.table,
                path=path,
                hint="restore the file from backup; diffcdc never edits commit records",
            ) from None
        if record is None:
            return None
        if not isinstance(record, dict) or record.get("format") not in READABLE_FORMATS:
            found = record.get("format") if isinstance(record, dict) else None
            raise StateError(
                f"commit record has format {found!r}; this diffcdc reads "
                f"formats {', '.join(map(str, READABLE_FORMATS))}",
                table=self.table,
                path=path,
                hint="this state was written by a newer diffcdc: upgrade diffcdc",
            )
        try:
            return CommitRecord.from_dict(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(
                f"commit record is incomplete: {type(exc).__name__} {exc}",
                table=self.table,
                path=path,
                hint="restore the file from backup; diffcdc never edits commit records",
            ) from None

    def read_document(self, path: str) -> Any:
        """The JSON document at ``path`` (relative to the table's folder), or None.

        Raises ValueError when it is not valid JSON.
        """
        return self.storage.read_json(path)

    def _repaired_state(self, version: str) -> tuple[str, StateManifest] | None:
        """Where a repaired version's state lives now (see :meth:`record_repaired_state`)."""
        path = f"log/{version}.state.json"
        try:
            document = self.read_document(path)
            if document is None:
                return None
            return str(document["state_path"]), StateManifest.from_dict(document["state_manifest"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(
                f"state repair record is unreadable: {exc}",
                table=self.table,
                path=self.storage.describe(path),
                hint="remove it and run 'diffcdc repair' again",
            ) from None

    def head(self) -> Commit | None:
        commits = self.commits()
        return commits[-1] if commits else None

    def abspath(self, relative: str) -> str:
        return paths.join(self.dir, relative)

    # -- writing ---------------------------------------------------------------------------

    def new_version_dir(self, version: int, run_id: str) -> str:
        """A fresh folder for a version being computed (not yet committed)."""
        path = paths.join(self.versions_dir, f"{version:020d}-{run_id}")
        paths.makedirs(path, exist_ok=False)
        return path

    def check_lease(self) -> None:
        """Raise :class:`ConcurrentRunError` when this run has lost the table's lease (a run
        frozen past its lease: another run may hold the table now)."""
        if self._lease is not None:
            self._lease.check()

    def claim(self, record: CommitRecord) -> None:
        """Commit ``record`` as version N+1 of the head it was computed from (CAS)."""
        self.check_lease()  # a run that lost its lease commits nothing
        version = record.version
        document = {**record.to_dict(), "format": STATE_FORMAT, "committed_at": now_iso()}
        try:
            self.storage.put_if_absent(f"log/{version:020d}.json", encode_json(document))
        except FileExistsError:
            raise ConcurrentRunError(
                f"version {version} was committed by another run first; this run changed nothing",
                table=self.table,
                snapshot=record.snapshot_id,
                hint="run again to pick up from the new state",
            ) from None

    def mark_published(self, version: int, sink_id: str, info: dict[str, Any]) -> None:
        """Record that sink ``sink_id`` has published ``version`` (written once)."""
        path = f"log/{version:020d}.published.{sink_id}.json"
        document = {"version": version, "sink": sink_id, "published_at": now_iso(), **info}
        with contextlib.suppress(FileExistsError):  # another resumer finished first
            self.storage.put_if_absent(path, encode_json(document))

    def record_repaired_state(
        self, version: int, state_path: str, manifest: StateManifest, reason: str
    ) -> None:
        """Point version ``version`` at a rebuilt state (the commit record is never edited)."""
        self.storage.put(
            f"log/{version:020d}.state.json",
            encode_json(
                {
                    "version": version,
                    "state_path": state_path,
                    "state_manifest": manifest.to_dict(),
                    "reason": reason,
                    "repaired_at": now_iso(),
                }
            ),
        )

    def sink_marks(self, sink_id: str) -> SinkMarks:
        """Per-version marks a sink keeps in the log (e.g. "the old folder is dropped")."""
        return SinkMarks(self.storage, sink_id)

    def has_documents(self) -> bool:
        """Whether the table has a folder in the state root (one a run may leave behind)."""
        return self.location.has_table(self.table)

    def forget(self) -> None:
        """Remove the table's documents and data (a failed first run's leftovers, a drop)."""
        self.location.forget(self.table)
        self._records.clear()
        self._marks.clear()

    def has_history(self) -> bool:
        """Whether the table has anything in state: a commit, or a reload or drop request.

        A folder without (one a run created, then failed in before its first commit) is not
        a table: nothing keeps a report there and ``status`` does not list it.
        """
        if self.requests.has_reload_request() or self.requests.has_drop_request():
            return True
        return any(
            _LOG_RE.match(name) and self.storage.exists(f"log/{name}")
            for name in self.storage.names("log")
        )
