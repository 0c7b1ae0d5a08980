"""Whether a Delta sink's target is where the sink left it, and its failures in words.

Before each version the sink checks that the table is where it left it: the same table (its
Delta table id, recorded when each version is staged), the newest commit that changes data is
its own last one (a foreign write, delete, ``RESTORE`` or schema change
is refused; table properties, a protocol upgrade, ``OPTIMIZE`` and ``VACUUM`` are harmless), the
table still exists once it published rows, and its change data feed is on.
A first image that is not asked for (a first load, a sink added) is written only to a path that
holds no Delta table: another tool's or another state's table there is refused, also when it
appears between the check and the publish. A refused target is recovered with
``diffcdc reload --table T --sink NAME``.

The engine runs these checks through the sink (:meth:`DeltaSink.quick_check
<diffcdc.sinks.delta.sink.DeltaSink.quick_check>` before the diff, ``check`` before the commit,
and the log again inside ``publish``); :class:`DeltaTarget` holds them, with opening the table
and turning a delta-rs failure into one line with its way out.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler

from diffcdc.core.changeset import OP
from diffcdc.errors import ConfigError, StorageError, TargetMismatch
from diffcdc.sinks.delta import history as scd2
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.table import SinkTable
from diffcdc.storage import paths
from diffcdc.storage.registry import is_url, local_path

#: Terminal colour codes that delta-rs puts into some messages.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")



def commits(manifest: dict[str, Any]) -> bool:
    """Whether a version makes a Delta commit: it has changes, or it is a full image of an
    empty snapshot (staged as such since that empties the table; one staged earlier made no
    commit and stays so)."""
    return bool(manifest.get("rows")) or bool(manifest.get("empty_image"))

@dataclass(frozen=True)
class DeltaTarget:
    """The Delta table (and changelog table) one sink writes, opened and checked."""

    sink_id: str
    table: SinkTable
    config: DeltaSinkConfig
    #: The command that publishes a full image to this sink alone (a refused target's way out).
    reload: str

    @property
    def history(self) -> bool:
        """Whether the table is a history (``mode = "scd2"``)."""
        return self.config.mode == "scd2"

    @property
    def base_app_id(self) -> str:
        """The application-transaction id of the table, without the sink's incarnation."""
        schema = f"{self.table.schema_name}." if self.table.schema_name else ""
        return f"diffcdc:{schema}{self.table.name}"

    def app_id(self, manifest: dict[str, Any] | None) -> str:
        """The application-transaction id of a version: the table and the sink's incarnation
        (manifests written before incarnations have none: the plain table id)."""
        incarnation = (manifest or {}).get("incarnation")
        return f"{self.base_app_id}:{incarnation}" if incarnation else self.base_app_id

    def mode_problem(self, table: DeltaTable, made_history: bool | None = None
                     ) -> ConfigError | None:
        """A table of the other mode at the path (a history where a current image is
        configured, or the reverse). ``made_history``: the mode this sink's own versions
        made the table with (a table the sink published to and no one changed since); None:
        told from its columns (a current table whose rows have columns named like a
        history's looks like one)."""
        made = scd2.is_history(table) if made_history is None else made_history
        if made == self.history:
            return None
        what = ("not a history table (no __START_AT/__END_AT/__VALID_FROM/__VALID_TO)"
                if self.history else "a history table (mode = \"scd2\")")
        want = "scd2" if self.history else "current"
        return ConfigError(
            f"sink {self.sink_id} has mode = \"{want}\" but the Delta table at the path is {what}",
            table=self.table.name, path=self.config.path,
            hint="point the sink at its own path, or set the mode the table was made with",
        )

    def open(self, path: str | None = None) -> DeltaTable | None:
        """The Delta table at ``path`` (default: the sink's path); None when there is none."""
        path = path or self.config.path
        self.refuse_file(path)
        try:
            return DeltaTable(path, storage_options=self.config.storage_options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise self.error(f"cannot open the Delta table: {exc}", path) from None

    def refuse_file(self, path: str) -> None:
        """Refuse a local path that is a regular file, or lies under one (delta-rs says the
        path "does not exist")."""
        if is_url(path):
            return
        here = os.path.abspath(local_path(path))
        while True:
            if os.path.isfile(here):
                what = "is a file" if here == os.path.abspath(local_path(path)) else (
                    f"lies under the file {here}")
                key = "changelog_path" if path == self.config.changelog_path else "path"
                raise ConfigError(
                    f"sink {self.sink_id}: the Delta table's {key} {what}, not a Delta table "
                    "folder",
                    table=self.table.name, path=path,
                    hint=f"point the sink's {key} at a folder (a Delta table, or none yet)",
                )
            parent = os.path.dirname(here)
            if parent == here or os.path.isdir(here):
                return
            here = parent

    def error(self, message: str, path: str | None = None) -> StorageError:
        """A delta-rs failure as one line (its colour codes left out) with its way out."""
        text = " ".join(ANSI.sub("", message).split())
        return StorageError(text[:1000], table=self.table.name, path=path or self.config.path,
                            hint=self._hint(text))

    def _hint(self, text: str) -> str:
        """The way out of a delta-rs failure, by its cause."""
        lower = text.lower()
        if any(w in lower for w in ("permission denied", "permissiondenied", "access denied",
                                    "authorizationfailure", "authorizationpermissionmismatch",
                                    "read-only file system", "status code: 403")):
            return ("give the run write access to the table's folder (on an object store: the "
                    "credentials in storage_options), then run again")
        if any(w in lower for w in ("no space left", "disk quota", "storage full")):
            return "free space on the storage that holds the table, then run again"
        if any(w in lower for w in ("conflict", "version already exists",
                                    "concurrent", "commit failed")):
            return ("another writer committed to the table at the same moment: stop it and run "
                    "again (the version is published exactly once)")
        if "append-only" in lower:
            return ("the table was made append-only (delta.appendOnly) by another writer: set "
                    "it back to false, then run again")
        if "failed validation check" in lower:
            return ("the table's CHECK constraints (added by another writer) refuse rows of the "
                    "version: drop them, then run again")
        if any(w in text for w in ("not found", "No such file", "missing file")):
            return "the table lost files diffcdc wrote: " + self.damaged_hint()
        if any(w in lower for w in ("schema", "cannot cast", "failed to cast",
                                    "type mismatch", "incompatible type")):
            return ("the table's columns do not take the version's rows (changed by another "
                    "writer?): " + (
                        "RESTORE the Delta table to its version before that change, or move it "
                        f"away and start a new history with '{self.reload}'"
                        if self.history else
                        f"replace it with a full image: '{self.reload}'"))
        return "check the path and its storage options, then run again"

    def damaged_hint(self) -> str:
        """What to do about a table that lost data files."""
        if self.history:  # a full image would only be added to a damaged history
            return ("restore them (RESTORE the Delta table to a version that has them, or the "
                    "files from a backup), or move the table away and start a new history "
                    f"with '{self.reload}'")
        return f"replace the table with a full image: '{self.reload}'"

    def mismatch(self, message: str, hint: str) -> TargetMismatch:
        """A refusal of the table at the sink's path, with its way out."""
        return TargetMismatch(message, table=self.table.name, path=self.config.path, hint=hint)

    def verify(self, published: list[tuple[int, dict[str, Any]]], *, files: bool = True
                ) -> DeltaTable | None:
        """Refuse a table that is not where this sink left it after ``published`` (its
        versions before the one at hand, all published); return the table (None: none yet).
        ``files``: also list the table's files (one that lost data files is refused)."""
        table = self.open()
        with_rows = [(v, m) for v, m in published if commits(m)]
        # a table this sink published to: by the mode its versions made (below)
        problem = self.mode_problem(table) if table is not None and not with_rows else None
        if problem is not None:
            raise problem
        if not with_rows:
            if table is not None:
                raise self.not_ours(table)
            self.claim_changelog()
            return None
        version, manifest = with_rows[-1]
        if table is None:
            raise self.mismatch(
                f"the Delta table is gone (it held diffcdc version {version})",
                f"publish a full image to it again: '{self.reload}'",
            )
        # the mode the sink's own versions made the table with (its columns may look like
        # the other mode's: a current table of a history's extract)
        problem = self.mode_problem(table, manifest.get("mode") == "scd2")
        if problem is not None:
            raise problem
        recorded = recorded_table_id(published)
        expected = recorded[1] if recorded is not None else None
        if recorded is not None and table.metadata().id != expected and (
                table.metadata().id != self._evolved_id(table, manifest, recorded[0])):
            raise self.mismatch(
                f"the Delta table was deleted and created again by another writer (table id "
                f"{table.metadata().id}; diffcdc published version {version} to table id "
                f"{expected})",
                "stop that writer; only if this table owns the path, replace the table with a "
                f"full image: '{self.reload}'",
            )
        config = table.metadata().configuration
        if not self.history and str(
                config.get("delta.enableChangeDataFeed", "")).lower() != "true":
            raise self.mismatch(
                "the Delta table's change data feed was turned off "
                "(delta.enableChangeDataFeed is not true)",
                "turn it on again and publish a full image: "
                f"'{self.reload}'",
            )
        if str(config.get("delta.appendOnly", "")).lower() == "true":
            raise self.mismatch(
                "the Delta table was made append-only (delta.appendOnly = true) by another "
                "writer: diffcdc's commits update and delete rows",
                "set delta.appendOnly back to false, then run again",
            )
        foreign = self._foreign_commit(table, version, manifest)
        if foreign is not None:
            raise self.mismatch(
                f"the Delta table was changed by another writer: its commit {foreign} came "
                f"after diffcdc version {version}",
                # a history keeps what it was given: a full image is merged into the changed
                # rows (or refused by a rewritten layout), it does not replace them
                "stop that writer, RESTORE the Delta table to its version before that commit "
                f"(or move it away to start a new history), then '{self.reload}'"
                if self.history else
                f"stop that writer, then replace the table with a full image: "
                f"'{self.reload}'",
            )
        # Data files the log names but the store lost (deleted by hand, a bad clean-up): a
        # MERGE could then miss rows it must update. One listing (delta-rs FSCK, dry run).
        if not files:
            return table
        try:
            lost = list(table.repair(dry_run=True).get("files_removed") or [])
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too
            raise self.error(f"cannot list the Delta table's files: {exc}") from None
        if lost:
            raise self.mismatch(
                f"the Delta table lost {len(lost)} data file(s) its log names (e.g. {lost[0]})",
                self.damaged_hint(),
            )
        return table

    def claim_changelog(self) -> None:
        """Before the sink's first image: refuse a changelog table already at
        ``changelog_path`` (another tool's, or another state's: its rows would be mixed)."""
        if self.config.changelog_path:
            log = self.open(self.config.changelog_path)
            if log is not None:
                raise self.not_ours(log, self.config.changelog_path)

    def not_ours(self, table: DeltaTable, path: str | None = None) -> TargetMismatch:
        """The refusal of a Delta table at the path (or the changelog path) that this sink did
        not publish to (a first image would overwrite another tool's or another diffcdc
        state's table, or append to its changelog)."""
        key = "changelog_path" if path else "path"
        whose = "another writer's table"
        try:
            entry = next((h for h in table.history(limit=100) if h.get("diffcdc.table")), None)
        except (DeltaError, OSError):
            entry = None
        if entry is not None:
            whose = (f"diffcdc table {entry['diffcdc.table']}'s (version "
                     f"{entry.get('diffcdc.version')}) written by another state or config")
        return TargetMismatch(
            f"a Delta table that this diffcdc table did not publish to is at the {key} "
            f"({whose}, Delta version {table.version()}): a full image would "
            + ("overwrite it" if key == "path" else "be appended to it"),
            table=self.table.name, path=path or self.config.path,
            hint=f"point the sink's {key} at a path of its own, or move that table away, then run "
                 "again; only if this table owns it, "
                 + ("replace it with a full image" if key == "path" else
                    "start a new incarnation in it with a full image")
                 + f": '{self.reload}'",
        )

    def check_kept(self, table: DeltaTable | None, version: int, staged: str) -> None:
        """Refuse a full image that a table keeping every row cannot take, before anything is
        written: a history (its full image is merged into the rows it keeps) and the
        changelog keep the rows of every incarnation, so a column they hold keeps its spelling
        and type there (a re-creation renamed a column in case, or retyped it)."""
        kept = [(self.config.changelog_path, "changelog", self.open(self.config.changelog_path))
                ] if self.config.changelog_path else []
        if self.history:
            kept.append((self.config.path, "history", table))
        filesystem, path = paths.arrow_source(staged)
        schema = ds.dataset(path, filesystem=filesystem, format="parquet").schema
        new = DeltaSchema.from_arrow(schema.remove(schema.get_field_index(OP))).fields
        for where, what, held in kept:
            if held is None:
                continue
            clash = column_clash(held.schema().fields, new)
            if clash:
                raise self.mismatch(
                    f"version {version} re-creates the table with columns the {what} at "
                    f"{where} cannot hold ({'; '.join(clash)}): it keeps every row it was "
                    "given, so a column keeps its name and type there",
                    f"move the {what} table away (or point the sink at a new path), then run "
                    f"again: a new {what} starts with version {version}",
                )

    def _foreign_commit(self, table: DeltaTable, version: int, manifest: dict[str, Any]
                        ) -> str | None:
        """The newest commit after this sink's commit of ``version`` that may change what the
        table holds, described; None when there is none. This sink's commit is the one whose
        log entry holds its application transaction ``(app id, version)`` (its commit info
        names the version and incarnation too); the commits after it are harmless when they
        change neither data nor schema (:meth:`_harmless`)."""
        app = self.app_id(manifest)
        later: list[dict[str, Any]] = []
        for entry in table.history(limit=100):
            actions = self._log_entry(table, int(entry["version"]))
            if self._ours(entry, actions, app, version, manifest):
                for newer in reversed(later):  # the oldest foreign commit is named
                    problem = self._harmless(table, newer, int(entry["version"]))
                    if problem is not None:
                        return problem
                return None
            later.append({**entry, "actions": actions})
        # None of the newest 100 commits is this sink's: harmless ones all, and the
        # application transaction shows its version
        if (table.transaction_version(app) or 0) == version and all(
                self._harmless(table, e, None) is None for e in later):
            return None
        return f"{table.version()} (not diffcdc's)"

    def _evolved_id(self, table: DeltaTable, manifest: dict[str, Any], since: int
                    ) -> str | None:
        """The table id that the newest of this sink's own commits of a version from ``since``
        on (the version staged against the recorded id) gave the table with a ``metaData``
        action (None: none among the newest 100 commits). delta-rs gives a table a new
        ``metaData.id`` when a MERGE adds a column, so the id recorded when a version was
        staged is not the table's any more once this sink's own commit added one; a table made
        again by another writer has its new id from a commit before ``since`` (its creation),
        and the commits after this sink's are checked apart (:meth:`_foreign_commit`)."""
        app = self.app_id(manifest)
        for entry in table.history(limit=100):
            if entry.get("diffcdc.incarnation") != manifest.get("incarnation"):
                continue
            actions = self._log_entry(table, int(entry["version"])) or []
            if not any(a.get("txn", {}).get("appId") == app
                       and int(a["txn"].get("version", -1)) >= since for a in actions):
                continue
            meta = next((a["metaData"] for a in actions if "metaData" in a), None)
            if meta is not None:
                return str(meta.get("id"))
        return None

    def _ours(self, entry: dict[str, Any], actions: list[dict[str, Any]] | None, app: str,
              version: int, manifest: dict[str, Any]) -> bool:
        """Whether the commit ``entry`` is this sink's commit of ``version``."""
        info = (str(entry.get("diffcdc.version")) == str(version)
                and entry.get("diffcdc.incarnation") == manifest.get("incarnation")
                and entry.get("diffcdc.table") in (None, self.table.name))
        if not info or actions is None:
            return info
        return any(a.get("txn", {}).get("appId") == app
                   and int(a["txn"].get("version", -1)) == version for a in actions)

    def _log_entry(self, table: DeltaTable, delta_version: int) -> list[dict[str, Any]] | None:
        """The actions of the table's commit ``delta_version`` (None: its log file is gone)."""
        try:
            handler = DeltaStorageHandler(table.table_uri, self.config.storage_options)
            with handler.open_input_file(f"_delta_log/{delta_version:020d}.json") as log:
                text = log.read().decode()
        except (OSError, DeltaError):
            return None
        return log_actions(text)

    def _harmless(self, table: DeltaTable, entry: dict[str, Any], ours: int | None
                  ) -> str | None:
        """None when the foreign commit ``entry`` changes no data and no schema: table
        properties (``SET TBLPROPERTIES``), a protocol upgrade, compaction (``OPTIMIZE``: files
        rewritten with ``dataChange = false``), ``VACUUM``; else the commit, described."""
        described = f"{entry.get('version')} ({entry.get('operation') or 'unknown operation'})"
        actions = entry.get("actions")
        if actions is None:
            return described
        for action in actions:
            if len(action) != 1:
                return described
            kind, body = next(iter(action.items()))
            if kind in ("commitInfo", "protocol", "txn", "domainMetadata"):
                continue
            if kind in ("add", "remove") and body.get("dataChange") is False:
                continue
            if kind == "metaData" and ours is not None and self._same_layout(
                    table, int(entry["version"]), ours):
                continue
            return described
        return None

    def _same_layout(self, table: DeltaTable, version: int, ours: int) -> bool:
        """Whether the table's schema and partitioning at Delta ``version`` are those of
        ``ours``."""
        try:
            at, before = (DeltaTable(table.table_uri, version=v,
                                     storage_options=self.config.storage_options)
                          for v in (version, ours))
        except (DeltaError, OSError):
            return False
        return (at.schema().to_json() == before.schema().to_json()
                and at.metadata().partition_columns == before.metadata().partition_columns)


def table_id(published: list[tuple[int, dict[str, Any]]]) -> str | None:
    """The Delta table id (``metaData.id``, new with each created table) the sink's
    versions since its last full image were staged against (None: none recorded yet; the
    full image itself may have created the table)."""
    recorded = recorded_table_id(published)
    return recorded[1] if recorded is not None else None


def recorded_table_id(published: list[tuple[int, dict[str, Any]]]) -> tuple[int, str] | None:
    """:func:`table_id` with the version whose manifest recorded it."""
    for version, manifest in reversed(published):
        if manifest.get("initial"):
            return None
        if manifest.get("table_id"):
            return version, str(manifest["table_id"])
    return None


def column_clash(held: list[Any], new: list[Any]) -> list[str]:
    """Columns of ``new`` (Delta fields) that a table holding ``held`` has under another
    spelling or type (names match case-blind, as Delta's do), described."""
    by_lower = {f.name.lower(): f for f in held}
    return [f"{old.name!r} {_type_text(old.type)} → {f.name!r} {_type_text(f.type)}"
            for f in new if (old := by_lower.get(f.name.lower())) is not None
            and (old.name != f.name or _type_text(old.type) != _type_text(f.type))]


def _type_text(dtype: Any) -> str:
    """A Delta column type as text: ``long``, ``decimal(10,2)``, a nested type's JSON."""
    return str(getattr(dtype, "type", None) or dtype.to_json())


def log_actions(text: str) -> list[dict[str, Any]]:
    """The actions of one Delta log file: one JSON object per line, split on newlines only
    (``str.splitlines`` also splits on U+0085, U+2028 ... which a value in the commit's
    statistics may hold)."""
    return [json.loads(line) for line in text.split("\n") if line.strip()]
