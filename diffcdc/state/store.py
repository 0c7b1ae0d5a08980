"""Versioned per-table state with a commit log moved by compare-and-swap.

Layout under ``<state root>/<table>/``::

    log/00000000000000000007.json                 commit record of version 7 (immutable)
    log/00000000000000000007.published.<sink>.json  written once sink <sink> published version 7
    log/00000000000000000007.state.json           where version 7's state lives since a repair
                                                  (``diffcdc repair``; the record stays as is)
    versions/00000000000000000007-<run>/          state Parquet (``state/``) + each sink's
                                                  staged output (``sinks/<sink>/``)
    reports/<run id>.json                    one report per run (passed or failed)
    .lock                                    advisory lock held while a run works on the table

A commit record is created with an exclusive, atomic create (hard link of a fully written
temporary file), so of two runs that both computed version N+1, exactly one commits; the other
gets :class:`ConcurrentRunError` and changes nothing. Once a record exists its batch is
decided: a later run publishes it (idempotently) before doing anything new, and never
recomputes it. The head of the table is the highest committed version.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from diffcdc.errors import ConcurrentRunError, StateError
from diffcdc.state.commit import LEGACY_SINK_ID, READABLE_FORMATS, STATE_FORMAT, CommitRecord
from diffcdc.state.integrity import StateManifest

_LOG_RE = re.compile(r"^(\d{20})\.json$")
_MARK_RE = re.compile(r"^(\d{20})\.published(?:\.(.+))?\.json$")
_REPAIR_RE = re.compile(r"^(\d{20})\.state\.json$")


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def _write_temp_json(path: str, document: dict[str, Any]) -> str:
    """Write ``document`` fully (and fsync it) to a hidden temp file beside ``path``."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    return tmp


def write_json_exclusive(path: str, document: dict[str, Any]) -> None:
    """Create ``path`` atomically with ``document``; FileExistsError if it exists."""
    tmp = _write_temp_json(path, document)
    try:
        os.link(tmp, path)  # the no-overwrite rename: fails when the name is taken
    finally:
        os.unlink(tmp)
    _fsync_dir(os.path.dirname(path))


def read_json(path: str) -> Any:
    """The JSON document at ``path``, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def write_json_replace(path: str, document: dict[str, Any]) -> None:
    """Write ``path`` atomically, replacing an older version (reports, not commits)."""
    os.replace(_write_temp_json(path, document), path)


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def report_changed(report: dict[str, Any]) -> bool:
    """Whether a run report committed a snapshot or finished publishing a version."""
    return bool(report.get("snapshots") or report.get("resumed_versions"))


@dataclass(frozen=True)
class Commit:
    """A committed version of a table and which of its sinks have published it."""

    record: CommitRecord
    published_sinks: frozenset[str]

    @property
    def version(self) -> int:
        return self.record.version

    @property
    def snapshot_id(self) -> str:
        return self.record.snapshot_id

    @property
    def unpublished(self) -> list[str]:
        """Sink ids of this version still to publish, in commit order."""
        return [s for s in self.record.sinks if s not in self.published_sinks]

    @property
    def published(self) -> bool:
        return not self.unpublished


class SinkMarks:
    """Facts a sink records once per version: ``log/<version>.<what>.<sink>.json``."""

    def __init__(self, log_dir: str, sink_id: str) -> None:
        self.log_dir = log_dir
        self.sink_id = sink_id

    def _paths(self, version: int, what: str) -> list[str]:
        paths = [os.path.join(self.log_dir, f"{version:020d}.{what}.{self.sink_id}.json")]
        if self.sink_id == LEGACY_SINK_ID:  # format 1 wrote ``<version>.<what>.json``
            paths.append(os.path.join(self.log_dir, f"{version:020d}.{what}.json"))
        return paths

    def has(self, version: int, what: str) -> bool:
        return any(os.path.exists(p) for p in self._paths(version, what))

    def put(self, version: int, what: str) -> None:
        with contextlib.suppress(FileExistsError):
            write_json_exclusive(
                self._paths(version, what)[0], {"version": version, what: now_iso()}
            )


class TableState:
    """The state store of one table."""

    def __init__(self, root: str, table: str) -> None:
        self.root = os.path.abspath(root)
        self.table = table
        self.dir = os.path.join(self.root, table)
        self.log_dir = os.path.join(self.dir, "log")
        self.versions_dir = os.path.join(self.dir, "versions")
        self.reports_dir = os.path.join(self.dir, "reports")

    # -- locking ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the table's advisory lock; a second run of the table fails at once.

        The kernel drops the lock when the process dies (even on kill -9), so a crash never
        leaves a stale lock behind. Commits are still compare-and-swap: the lock only turns a
        guaranteed later failure into an immediate, clear one.
        """
        os.makedirs(self.dir, exist_ok=True)
        handle = open(os.path.join(self.dir, ".lock"), "a+")
        try:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise ConcurrentRunError(
                        "another diffcdc run is working on this table",
                        table=self.table,
                        path=self.dir,
                        hint="wait for it to finish (the scheduler may have started two runs)",
                    ) from None
                raise
            yield
        finally:
            handle.close()

    # -- reading ---------------------------------------------------------------------------

    def commits(self) -> list[Commit]:
        """Every committed version, oldest first."""
        try:
            names = sorted(os.listdir(self.log_dir))
        except FileNotFoundError:
            return []
        commits = []
        marks: dict[str, set[str]] = {}
        for name in names:
            mark = _MARK_RE.match(name)
            if mark:  # format 1 wrote ``<v>.published.json``: the landing zone's mark
                marks.setdefault(mark.group(1), set()).add(mark.group(2) or LEGACY_SINK_ID)
        for name in names:
            match = _LOG_RE.match(name)
            if not match:
                continue
            path = os.path.join(self.log_dir, name)
            try:
                with open(path, encoding="utf-8") as handle:
                    record = json.load(handle)
            except (OSError, ValueError) as exc:
                raise StateError(
                    f"commit record is unreadable: {exc}",
                    table=self.table,
                    path=path,
                    hint="restore the file from backup; diffcdc never edits commit records",
                ) from None
            if record.get("format") not in READABLE_FORMATS:
                raise StateError(
                    f"commit record has format {record.get('format')!r}; this diffcdc reads "
                    f"formats {', '.join(map(str, READABLE_FORMATS))}",
                    table=self.table,
                    path=path,
                    hint="this state was written by a newer diffcdc: upgrade diffcdc",
                )
            try:
                parsed = CommitRecord.from_dict(record)
            except (KeyError, TypeError, ValueError) as exc:
                raise StateError(
                    f"commit record is incomplete: {type(exc).__name__} {exc}",
                    table=self.table,
                    path=path,
                    hint="restore the file from backup; diffcdc never edits commit records",
                ) from None
            repaired = self._repaired_state(match.group(1))
            if repaired is not None:
                parsed = replace(parsed, state_path=repaired[0], state_manifest=repaired[1])
            commits.append(Commit(parsed, frozenset(marks.get(match.group(1), ()))))
        return commits

    def _repaired_state(self, version: str) -> tuple[str, StateManifest] | None:
        """Where a repaired version's state lives now (see :meth:`record_repaired_state`)."""
        path = os.path.join(self.log_dir, f"{version}.state.json")
        try:
            document = read_json(path)
            if document is None:
                return None
            return str(document["state_path"]), StateManifest.from_dict(document["state_manifest"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(
                f"state repair record is unreadable: {exc}",
                table=self.table,
                path=path,
                hint="remove it and run 'diffcdc repair' again",
            ) from None

    def head(self) -> Commit | None:
        commits = self.commits()
        return commits[-1] if commits else None

    def abspath(self, relative: str) -> str:
        return os.path.join(self.dir, relative)

    # -- writing ---------------------------------------------------------------------------

    def new_version_dir(self, version: int, run_id: str) -> str:
        """A fresh folder for a version being computed (not yet committed)."""
        path = os.path.join(self.versions_dir, f"{version:020d}-{run_id}")
        os.makedirs(path, exist_ok=False)
        return path

    def claim(self, record: CommitRecord) -> None:
        """Commit ``record`` as version N+1 of the head it was computed from (CAS)."""
        version = record.version
        path = os.path.join(self.log_dir, f"{version:020d}.json")
        document = {**record.to_dict(), "format": STATE_FORMAT, "committed_at": now_iso()}
        try:
            write_json_exclusive(path, document)
        except FileExistsError:
            raise ConcurrentRunError(
                f"version {version} was committed by another run first; this run changed nothing",
                table=self.table,
                snapshot=record.snapshot_id,
                hint="run again to pick up from the new state",
            ) from None

    def mark_published(self, version: int, sink_id: str, info: dict[str, Any]) -> None:
        """Record that sink ``sink_id`` has published ``version`` (written once)."""
        path = os.path.join(self.log_dir, f"{version:020d}.published.{sink_id}.json")
        document = {"version": version, "sink": sink_id, "published_at": now_iso(), **info}
        try:
            write_json_exclusive(path, document)
        except FileExistsError:
            return  # another resumer finished first: same outcome

    def record_repaired_state(
        self, version: int, state_path: str, manifest: StateManifest, reason: str
    ) -> None:
        """Point version ``version`` at a rebuilt state (the commit record is never edited)."""
        path = os.path.join(self.log_dir, f"{version:020d}.state.json")
        write_json_replace(
            path,
            {
                "version": version,
                "state_path": state_path,
                "state_manifest": manifest.to_dict(),
                "reason": reason,
                "repaired_at": now_iso(),
            },
        )
        _fsync_dir(self.log_dir)

    # -- re-creating and dropping the table ---------------------------------------------------

    @property
    def reload_path(self) -> str:
        return os.path.join(self.dir, "reload.json")

    @property
    def drop_path(self) -> str:
        return os.path.join(self.dir, "drop.json")

    def request_reload(self, reason: str) -> dict[str, Any]:
        """Record that the next commit must re-create the table (kept until it is committed)."""
        existing = self.reload_request()
        if existing is not None:
            return existing
        request = {"id": uuid.uuid4().hex, "requested_at": now_iso(), "reason": reason}
        write_json_replace(self.reload_path, request)
        return request

    def reload_request(self) -> dict[str, Any] | None:
        """The pending reload request, or None (also once a commit has carried it out)."""
        request = read_json(self.reload_path)
        if request is None:
            return None
        if self.reload_carried_out(request):
            os.unlink(self.reload_path)  # a crash right after the commit left it behind
            return None
        return dict(request)

    def reload_carried_out(self, request: dict[str, Any]) -> bool:
        """Whether a commit has re-created the table for this reload request."""
        return any(
            c.record.recreate is not None and c.record.recreate.request == request.get("id")
            for c in self.commits()
        )

    def clear_reload_request(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.reload_path)

    def sink_marks(self, sink_id: str) -> SinkMarks:
        """Per-version marks a sink keeps in the log (e.g. "the old folder is dropped")."""
        return SinkMarks(self.log_dir, sink_id)

    def has_history(self) -> bool:
        """Whether the table has anything in state: a commit, or a reload or drop request.

        A folder without (one a run created, then failed in before its first commit) is not
        a table: nothing keeps a report there and ``status`` does not list it.
        """
        if os.path.exists(self.reload_path) or os.path.exists(self.drop_path):
            return True
        try:
            return any(_LOG_RE.match(name) for name in os.listdir(self.log_dir))
        except FileNotFoundError:
            return False

    def save_report(self, report: dict[str, Any]) -> str:
        """Keep a run's report: ``reports/<run id>.json``, ``last_report.json`` (the last run)
        and, when the run processed or published something, ``last_change.json`` (so a run
        with nothing to do never hides the last real counts)."""
        path = os.path.join(self.reports_dir, f"{report.get('run_id') or new_run_id()}.json")
        write_json_replace(path, report)
        write_json_replace(os.path.join(self.dir, "last_report.json"), report)
        if report_changed(report):
            write_json_replace(os.path.join(self.dir, "last_change.json"), report)
        return path

    def save_last_run(self, report: dict[str, Any]) -> None:
        """Keep a run that did nothing as the table's last run (``last_report.json`` only: the
        reports folder and ``last_change.json`` keep the runs that did something)."""
        write_json_replace(os.path.join(self.dir, "last_report.json"), report)

    def last_report(self) -> dict[str, Any] | None:
        return read_json(os.path.join(self.dir, "last_report.json"))

    def last_change(self) -> dict[str, Any] | None:
        """The report of the last run that committed or published something (None: never).

        State written before ``last_change.json`` existed: the newest such report in
        ``reports/`` (their names start with the run's UTC start time).
        """
        found = read_json(os.path.join(self.dir, "last_change.json"))
        if found is not None:
            return dict(found)
        try:
            names = sorted(os.listdir(self.reports_dir), reverse=True)
        except FileNotFoundError:
            return None
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                try:
                    report = read_json(os.path.join(self.reports_dir, name))
                except ValueError:
                    continue
                if isinstance(report, dict) and report_changed(report):
                    return report
        return None

    # -- housekeeping ----------------------------------------------------------------------

    def prune(self, keep_versions: int) -> list[str]:
        """Remove abandoned version folders and state versions beyond the retention.

        Only called while holding the lock, so an uncommitted folder is never one being
        written. Staged landing files of published versions are removed too (they live in the
        landing zone now).
        """
        removed = []
        commits = self.commits()
        committed = {c.record.version_dir: c for c in commits}
        keep = {c.record.version_dir for c in commits[-max(1, keep_versions):]}
        try:
            names = os.listdir(self.versions_dir)
        except FileNotFoundError:
            return removed
        for name in names:
            rel = f"versions/{name}"
            commit = committed.get(rel)
            path = os.path.join(self.versions_dir, name)
            if commit is None or rel not in keep:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(rel)
            elif commit.published:
                for staged in ("landing", "sinks", "changes"):  # published: only state is kept
                    shutil.rmtree(os.path.join(path, staged), ignore_errors=True)
                for entry in os.listdir(path):  # state folders a repair replaced
                    if entry.startswith("state") and f"{rel}/{entry}" != commit.record.state_path:
                        shutil.rmtree(os.path.join(path, entry), ignore_errors=True)
        return removed
