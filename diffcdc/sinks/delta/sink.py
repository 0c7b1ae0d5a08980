"""A Delta table whose change data feed is the diff, written with delta-rs (no JVM jars).

Each committed diffcdc version with changes becomes exactly one Delta commit: a first load (or a
full image) is one write, later versions one MERGE of the change set on the key columns
(update, delete, insert), so ``load_cdf`` of that commit shows ``insert``, ``delete`` (the full
old row) and ``update_preimage``/``update_postimage`` pairs. Exactly once: every commit carries
the application transaction ``(diffcdc:<table>, <diffcdc version>)``; publishing a version the
table already records is a no-op, whatever crashed in between. The application id carries
the sink's *incarnation* (a new one each time the sink starts from a full image), so a table
re-created from scratch (``diffcdc drop``, a new state) never inherits an old version number.

Before each version the sink checks that the table is where it left it: the same table (its
Delta table id, recorded when each version is staged), the newest commit that changes data is
its own last one (a foreign write, delete, ``RESTORE`` or schema change
is refused; table properties, a protocol upgrade, ``OPTIMIZE`` and ``VACUUM`` are harmless), the
table still exists once it published rows, and its change data feed is on.
A first image that is not asked for (a first load, a sink added) is written only to a path that
holds no Delta table: another tool's or another state's table there is refused, also when it
appears between the check and the publish. A refused target is recovered with
``diffcdc reload --table T --sink NAME``.

With ``mode = "scd2"`` the table is a history instead (:mod:`diffcdc.sinks.delta.history`):
the same change set, exactly once the same way, merged as closed and opened rows.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from pyspark.sql import SparkSession

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.column_changes import CHANGED_COLUMNS, partners
from diffcdc.core.compare import Replayed, arrow_rows
from diffcdc.core.sql import quote
from diffcdc.errors import (
    ConfigError,
    DiffcdcError,
    InputRefused,
    StorageError,
    TargetMismatch,
)
from diffcdc.faults import crash_point
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.delta import history as scd2
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.delta.feed import (
    CHANGE_COLUMNS,
    append_changelog,
    files_dataset,
    plain_types,
    unsliced,
)
from diffcdc.sources.snapshot_time import format_time, read_time
from diffcdc.spark.paths import spark_path
from diffcdc.storage import paths
from diffcdc.storage.registry import is_url, local_path

CDF = {"delta.enableChangeDataFeed": "true"}
#: Terminal colour codes that delta-rs puts into some messages.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Columns of the changelog table that tell diffcdc's versions and the table's incarnations
#: apart (a re-created Delta table restarts ``_commit_version`` at 0).
CHANGELOG_COLUMNS = ("_diffcdc_version", "_diffcdc_incarnation")


class DeltaSink(Sink):
    """The table at ``path``, mirroring the source table with exact types."""

    type = "delta"
    reserved_columns = CHANGE_COLUMNS + CHANGELOG_COLUMNS

    def __init__(self, sink_id: str, table: SinkTable, config: DeltaSinkConfig) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.history = config.mode == "scd2"
        self.needs_snapshot_time = self.history
        if self.history:
            self.reserved_columns = (*scd2.HISTORY_COLUMNS, *CHANGE_COLUMNS, *CHANGELOG_COLUMNS)
        elif config.changelog_path:
            self.reserved_columns = (*CHANGE_COLUMNS, *CHANGELOG_COLUMNS, CHANGED_COLUMNS)
        self.base_app_id = (
            f"diffcdc:{table.schema_name + '.' if table.schema_name else ''}{table.name}"
        )

    def app_id(self, manifest: dict[str, Any] | None) -> str:
        """The application-transaction id of a version: the table and the sink's incarnation
        (manifests written before incarnations have none: the plain table id)."""
        incarnation = (manifest or {}).get("incarnation")
        return f"{self.base_app_id}:{incarnation}" if incarnation else self.base_app_id

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "target": self.config.path,
                "changelog": self.config.changelog_path, "mode": self.config.mode}

    def _mode_problem(self, table: DeltaTable) -> ConfigError | None:
        """A table of the other mode at the path (a history where a current image is
        configured, or the reverse)."""
        if scd2.is_history(table) == self.history:
            return None
        what = ("not a history table (no __START_AT/__END_AT/__VALID_FROM/__VALID_TO)"
                if self.history else "a history table (mode = \"scd2\")")
        want = "scd2" if self.history else "current"
        return ConfigError(
            f"sink {self.id} has mode = \"{want}\" but the Delta table at the path is {what}",
            table=self.table.name, path=self.config.path,
            hint="point the sink at its own path, or set the mode the table was made with",
        )

    def accept(self, changes: ChangeSet) -> None:
        self._refuse_file(self.config.path)
        if self.config.changelog_path:
            self._refuse_file(self.config.changelog_path)
        if not self.history:
            return
        if changes.snapshot_time is None:
            raise InputRefused("the snapshot has no as-of time for the history sink",
                               table=self.table.name, snapshot=changes.snapshot_id,
                               hint="give run_dataframe a snapshot_time")
        columns = {c.lower() for c in changes.columns}
        named = [*(self.config.track_history_columns or ()),
                 *(self.config.track_history_except_columns or ())]
        missing = [c for c in named if c.lower() not in columns]
        keys = [c for c in named if c.lower() in {k.lower() for k in self.table.keys}]
        if missing or keys:
            raise ConfigError(
                f"sink {self.id}: tracked history columns "
                + (f"{missing} are not columns of the snapshot" if missing
                   else f"{keys} are key columns"),
                table=self.table.name, snapshot=changes.snapshot_id,
                hint="name non-key columns of the table in track_history_columns / "
                     "track_history_except_columns",
            )
        table = self._open()
        problem = self._mode_problem(table) if table is not None else None
        if problem is not None:
            raise problem

    def _open(self, path: str | None = None) -> DeltaTable | None:
        path = path or self.config.path
        self._refuse_file(path)
        try:
            return DeltaTable(path, storage_options=self.config.storage_options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise self._error(f"cannot open the Delta table: {exc}", path) from None

    def _refuse_file(self, path: str) -> None:
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
                    f"sink {self.id}: the Delta table's {key} {what}, not a Delta table folder",
                    table=self.table.name, path=path,
                    hint=f"point the sink's {key} at a folder (a Delta table, or none yet)",
                )
            parent = os.path.dirname(here)
            if parent == here or os.path.isdir(here):
                return
            here = parent

    def _error(self, message: str, path: str | None = None) -> StorageError:
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
            return "the table lost files diffcdc wrote: " + self._damaged_hint()
        if any(w in lower for w in ("schema", "cannot cast", "failed to cast",
                                    "type mismatch", "incompatible type")):
            return ("the table's columns do not take the version's rows (changed by another "
                    "writer?): " + (
                        "RESTORE the Delta table to its version before that change, or move it "
                        f"away and start a new history with '{self.reload_command()}'"
                        if self.history else
                        f"replace it with a full image: '{self.reload_command()}'"))
        return "check the path and its storage options, then run again"

    def _damaged_hint(self) -> str:
        """What to do about a table that lost data files."""
        if self.history:  # a full image would only be added to a damaged history
            return ("restore them (RESTORE the Delta table to a version that has them, or the "
                    "files from a backup), or move the table away and start a new history "
                    f"with '{self.reload_command()}'")
        return f"replace the table with a full image: '{self.reload_command()}'"

    def check(self, history: SinkHistory) -> None:
        self._verify(list(history.manifests))

    def quick_check(self, history: SinkHistory) -> None:
        """The table's log only: its files are listed once per version, before the commit."""
        self._verify(list(history.manifests), files=False)

    def _verify(self, published: list[tuple[int, dict[str, Any]]], *, files: bool = True
                ) -> DeltaTable | None:
        """Refuse a table that is not where this sink left it after ``published`` (its
        versions before the one at hand, all published); return the table (None: none yet).
        ``files``: also list the table's files (one that lost data files is refused)."""
        table = self._open()
        problem = self._mode_problem(table) if table is not None else None
        if problem is not None:
            raise problem
        with_rows = [(v, m) for v, m in published if m.get("rows")]
        if not with_rows:
            if table is not None:
                raise self._not_ours(table)
            self._claim_changelog()
            return None
        version, manifest = with_rows[-1]
        if table is None:
            raise self._mismatch(
                f"the Delta table is gone (it held diffcdc version {version})",
                f"publish a full image to it again: '{self.reload_command()}'",
            )
        recorded = self._recorded_table_id(published)
        expected = recorded[1] if recorded is not None else None
        if recorded is not None and table.metadata().id != expected and (
                table.metadata().id != self._evolved_id(table, manifest, recorded[0])):
            raise self._mismatch(
                f"the Delta table was deleted and created again by another writer (table id "
                f"{table.metadata().id}; diffcdc published version {version} to table id "
                f"{expected})",
                "stop that writer; only if this table owns the path, replace the table with a "
                f"full image: '{self.reload_command()}'",
            )
        config = table.metadata().configuration
        if not self.history and str(
                config.get("delta.enableChangeDataFeed", "")).lower() != "true":
            raise self._mismatch(
                "the Delta table's change data feed was turned off "
                "(delta.enableChangeDataFeed is not true)",
                "turn it on again and publish a full image: "
                f"'{self.reload_command()}'",
            )
        if str(config.get("delta.appendOnly", "")).lower() == "true":
            raise self._mismatch(
                "the Delta table was made append-only (delta.appendOnly = true) by another "
                "writer: diffcdc's commits update and delete rows",
                "set delta.appendOnly back to false, then run again",
            )
        foreign = self._foreign_commit(table, version, manifest)
        if foreign is not None:
            raise self._mismatch(
                f"the Delta table was changed by another writer: its commit {foreign} came "
                f"after diffcdc version {version}",
                f"stop that writer, then replace the table with a full image: "
                f"'{self.reload_command()}'",
            )
        # Data files the log names but the store lost (deleted by hand, a bad clean-up): a
        # MERGE could then miss rows it must update. One listing (delta-rs FSCK, dry run).
        if not files:
            return table
        try:
            lost = list(table.repair(dry_run=True).get("files_removed") or [])
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too
            raise self._error(f"cannot list the Delta table's files: {exc}") from None
        if lost:
            raise self._mismatch(
                f"the Delta table lost {len(lost)} data file(s) its log names (e.g. {lost[0]})",
                self._damaged_hint(),
            )
        return table

    def _claim_changelog(self) -> None:
        """Before the sink's first image: refuse a changelog table already at
        ``changelog_path`` (another tool's, or another state's: its rows would be mixed)."""
        if self.config.changelog_path:
            log = self._open(self.config.changelog_path)
            if log is not None:
                raise self._not_ours(log, self.config.changelog_path)

    def _not_ours(self, table: DeltaTable, path: str | None = None) -> TargetMismatch:
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
                 + f": '{self.reload_command()}'",
        )

    @staticmethod
    def _table_id(published: list[tuple[int, dict[str, Any]]]) -> str | None:
        """The Delta table id (``metaData.id``, new with each created table) the sink's
        versions since its last full image were staged against (None: none recorded yet; the
        full image itself may have created the table)."""
        recorded = DeltaSink._recorded_table_id(published)
        return recorded[1] if recorded is not None else None

    @staticmethod
    def _recorded_table_id(published: list[tuple[int, dict[str, Any]]]
                           ) -> tuple[int, str] | None:
        """:meth:`_table_id` with the version whose manifest recorded it."""
        for version, manifest in reversed(published):
            if manifest.get("initial"):
                return None
            if manifest.get("table_id"):
                return version, str(manifest["table_id"])
        return None

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

    def _mismatch(self, message: str, hint: str) -> TargetMismatch:
        return TargetMismatch(message, table=self.table.name, path=self.config.path, hint=hint)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        if changes.rows:
            frame = changes.frame
            frame.write.mode("error").parquet(
                spark_path(frame.sparkSession, os.path.join(staging_dir, "changes")))
        if changes.initial or history.last is None:
            incarnation = uuid.uuid4().hex[:16]
        else:
            incarnation = history.last[1].get("incarnation")
        try:  # the table this version continues (recorded while it is there)
            table = self._open()
        except DiffcdcError:  # unreachable: the sink fails on its own at publish
            table = None
        manifest = {"target": self.config.path, "changelog": self.config.changelog_path,
                    "recreate": changes.recreate is not None, "keys": list(changes.table.keys),
                    "incarnation": incarnation,
                    "table_id": table.metadata().id if table is not None else None}
        if self.history:
            assert changes.snapshot_time is not None  # accept() refused a version without
            manifest.update(mode="scd2", valid_from=format_time(changes.snapshot_time),
                            track=self.config.track_history_columns,
                            track_except=self.config.track_history_except_columns or [])
        return manifest

    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory,
        *, checked: bool = False,
    ) -> None:
        if not manifest.get("rows"):
            return  # a version without changes makes no Delta commit
        if (manifest.get("mode") == "scd2") != self.history:
            raise ConfigError(
                f"sink {self.id}: version {version} was staged for mode = "
                f"\"{manifest.get('mode', 'current')}\" but the sink now has mode = "
                f"\"{self.config.mode}\"",
                table=self.table.name, path=self.config.path,
                hint="set the mode back until the version is published, or give the new mode "
                     "its own sink and path",
            )
        table = self._open()
        if table is None or (table.transaction_version(self.app_id(manifest)) or 0) < version:
            if not manifest.get("initial"):
                # Right before the MERGE (protects the target): a commit of another writer since
                # the check before this version's commit (the state's hashing and the other
                # sinks' publishing came in between), or since a run long ago for a version
                # published late. ``checked``: the files were listed at that check, the log is
                # read again.
                table = self._verify([(v, m) for v, m in history.manifests if v < version],
                                     files=not checked)
            elif table is not None and (problem := self._mode_problem(table)) is not None:
                raise problem
            elif table is not None and not manifest.get("recreate"):
                # a first image (a first load, a sink added) onto a table that appeared after
                # the check, or was refused by it: never overwritten unless asked (reload)
                raise self._not_ours(table)
            elif not manifest.get("recreate"):
                self._claim_changelog()
            if manifest.get("initial"):
                self._check_kept(table, version, os.path.join(staging_dir, "changes"))
            self._commit(table, version, manifest, os.path.join(staging_dir, "changes"))
            crash_point("delta_committed", scope=self.id)
        if self.config.changelog_path:
            self._changelog(version, manifest, os.path.join(staging_dir, "changes"))

    def _commit(
        self, table: DeltaTable | None, version: int, manifest: dict[str, Any], staged: str
    ) -> None:
        metadata = {"diffcdc.table": self.table.name, "diffcdc.version": str(version),
                    "diffcdc.snapshot_id": str(manifest.get("snapshot_id", ""))}
        if manifest.get("incarnation"):
            metadata["diffcdc.incarnation"] = str(manifest["incarnation"])
        props = CommitProperties(
            custom_metadata=metadata,
            app_transactions=[Transaction(self.app_id(manifest), version)],
        )
        data = self._staged(staged)
        try:
            if self.history:
                self._commit_history(table, version, manifest, data, props)
                return
            if manifest.get("initial") or table is None:
                write_deltalake(
                    self.config.path, unsliced(data.drop_columns([OP])),
                    mode="overwrite" if table is not None else "error",
                    schema_mode="overwrite" if table is not None else None,
                    configuration=CDF, storage_options=self.config.storage_options,
                    commit_properties=props,
                )
                return
            self._merge(table, data, manifest["keys"], props)
        except DiffcdcError:
            raise
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too (C Data)
            # delta-rs reports a data file missing under the table as a bare Exception from
            # Arrow's C Data interface: every failure of the commit is this sink's, in one line.
            raise self._error(f"Delta commit of version {version} failed: {exc}") from None

    def _commit_history(self, table: DeltaTable | None, version: int, manifest: dict[str, Any],
                        data: pa.Table, props: CommitProperties) -> None:
        """Version ``version`` into the history table (see :mod:`diffcdc.sinks.delta.history`)."""
        at = scd2.Version(version, read_time(str(manifest["valid_from"])))
        keys = list(manifest["keys"])
        if table is None:  # the first load: every row opened
            rows = scd2.image_rows(data.drop_columns([OP]), at)
            write_deltalake(self.config.path, unsliced(rows), mode="error",
                            storage_options=self.config.storage_options,
                            commit_properties=props)
            return
        newest = scd2.newest_valid_from(table, self.config.storage_options)
        if newest is not None and newest > at.valid_from:  # never a row valid before it opens
            raise self._mismatch(
                f"the history holds rows valid from {format_time(newest)}, after the as-of time "
                f"{format_time(at.valid_from)} of version {version} (a snapshot time in the "
                "future was committed)",
                "RESTORE the Delta table to its version before those rows, or move it away, then "
                f"'{self.reload_command()}'",
            )
        target = [f.name for f in table.schema().fields]
        skip = {c.lower() for c in (*keys, *self.table.exclude, *scd2.HISTORY_COLUMNS, OP)}
        compared = [c for c in dict.fromkeys([*data.column_names, *target])
                    if c.lower() not in skip]
        tracking = scd2.Tracking(
            tuple(manifest["track"]) if manifest.get("track") is not None else None,
            tuple(manifest.get("track_except") or ()))
        if manifest.get("initial"):  # a full image onto the history: what differs from it
            image = data.drop_columns([OP])
            current = plain_types(scd2.open_rows(table, keys, None, self.config.storage_options))
            copies, differ = scd2.copied_open_rows(current, keys)
            if differ:  # which of them diffcdc wrote cannot be told
                raise self._mismatch(
                    f"the history has {len(differ)} key(s) with several open rows that differ "
                    f"(e.g. {', '.join(f'{k}={v!r}' for k, v in zip(keys, differ[0]))}): "
                    "another writer's rows",
                    "RESTORE the Delta table to its version before that writer's commit, or "
                    f"move it away, then '{self.reload_command()}'",
                )
            if copies.num_rows:  # another writer's exact copies: removed in a commit first
                scd2.remove_copies(table, copies, keys, CommitProperties(custom_metadata={
                    "diffcdc.table": self.table.name,
                    "diffcdc.repair": f"copies of open rows removed before version {version}"}))
                table = self._open()
                assert table is not None
                current = plain_types(scd2.open_rows(table, keys, None, self.config.storage_options))
            gone_rows = [i for i, j in enumerate(partners(current, image, keys)) if j is None]
            gone = current.take(scd2.row_indices(gone_rows)).select(keys)
            source = scd2.merge_source(image, gone, current, keys, compared, tracking, at,
                                       unchanged_possible=True)
        else:
            op = data.column(OP)
            updates = data.filter(pc.equal(op, OP_UPDATE))
            current = plain_types(scd2.open_rows(table, keys, updates,
                                                 self.config.storage_options))
            if any(j is None for j in partners(updates, current, keys)):
                raise self._mismatch(
                    f"the history has no open row for a key version {version} updates",
                    f"replace the table's current rows with a full image: "
                    f"'{self.reload_command()}'",
                )
            source = scd2.merge_source(
                data.filter(pc.not_equal(op, OP_DELETE)).drop_columns([OP]),
                data.filter(pc.equal(op, OP_DELETE)).select(keys), current, keys, compared,
                tracking, at, unchanged_possible=False)
        if source.num_rows:
            scd2.merge(table, source, keys, at, props)
        else:  # nothing differs: the version is still recorded, by an empty commit
            write_deltalake(self.config.path, pa.schema(table.schema().to_arrow()).empty_table(),
                            mode="append", storage_options=self.config.storage_options,
                            commit_properties=props)

    def _check_kept(self, table: DeltaTable | None, version: int, staged: str) -> None:
        """Refuse a full image that a table keeping every row cannot take, before anything is
        written: a history (its full image is merged into the rows it keeps) and the
        changelog keep the rows of every incarnation, so a column they hold keeps its spelling
        and type there (a re-creation renamed a column in case, or retyped it)."""
        kept = [(self.config.changelog_path, "changelog", self._open(self.config.changelog_path))
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
                raise self._mismatch(
                    f"version {version} re-creates the table with columns the {what} at "
                    f"{where} cannot hold ({'; '.join(clash)}): it keeps every row it was "
                    "given, so a column keeps its name and type there",
                    f"move the {what} table away (or point the sink at a new path), then run "
                    f"again: a new {what} starts with version {version}",
                )

    @staticmethod
    def _staged(staged: str) -> pa.Table:
        """The change set a version staged for this sink."""
        filesystem, path = paths.arrow_source(staged)
        return ds.dataset(path, filesystem=filesystem, format="parquet").to_table()

    def _merge(
        self, table: DeltaTable, data: pa.Table, keys: list[str], props: CommitProperties
    ) -> None:
        columns = [c for c in data.column_names if c != OP]
        target = pa.schema(table.schema().to_arrow())
        # A column the snapshots no longer have (removed_columns = "null") becomes NULL in the
        # rows written: the source frame carries it as a typed NULL column (delta-rs resolves
        # no bare NULL against a target column).
        for name in (n for n in target.names if n not in columns):
            data = data.append_column(target.field(name), pa.nulls(data.num_rows, target.field(name).type))
            columns.append(name)
        # delta-rs parses the target column names as SQL too: quoted, or ``order.id`` would
        # read as column ``id`` of a table ``order``
        values = {quote(c): f"s.{quote(c)}" for c in columns}
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
        (
            table.merge(unsliced(data), predicate=on, source_alias="s", target_alias="t",
                        merge_schema=True, commit_properties=props)
            .when_matched_update(updates=values, predicate=f"s.{quote(OP)} = {OP_UPDATE}")
            .when_matched_delete(predicate=f"s.{quote(OP)} = {OP_DELETE}")
            .when_not_matched_insert(updates=values, predicate=f"s.{quote(OP)} = {OP_INSERT}")
            .execute()
        )

    def _changelog(self, version: int, manifest: dict[str, Any], staged: str) -> None:
        table = self._open()
        assert table is not None
        app = f"{self.app_id(manifest)}:changelog"
        log = self._open(self.config.changelog_path)
        if log is not None and (log.transaction_version(app) or 0) >= version:
            return
        try:
            image = self._staged(staged).drop_columns([OP]) if manifest.get("initial") else None
            append_changelog(table, version, self.config.changelog_path or "", app,
                             self.config.storage_options,
                             incarnation=str(manifest.get("incarnation") or ""), image=image,
                             keys=list(manifest["keys"]), exclude=self.table.exclude)
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too
            raise self._error(f"changelog append of version {version} failed: {exc}",
                              self.config.changelog_path) from None

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        if not manifest.get("rows"):
            return True
        table = self._open()
        return table is not None and (
            table.transaction_version(self.app_id(manifest)) or 0) >= version

    def replay(self, spark: SparkSession) -> Replayed:
        """The table's rows (a history: its open rows, without the validity columns)."""
        table = self._open()
        rows, columns = [], []
        if table is not None:
            # read from its files: a date before year 1 or after 9999 stays exact (Day)
            data = plain_types(files_dataset(table, self.config.storage_options).to_table())
            if self.history:
                data = data.filter(pc.is_null(data.column(scd2.END_AT)))
                data = data.drop_columns(list(scd2.HISTORY_COLUMNS))
            rows, columns = arrow_rows(data), data.column_names
        return Replayed(list(self.table.keys), columns, rows,
                        units=(table.version() + 1) if table is not None else 0)


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
