"""A Delta table whose change data feed is the diff, written with delta-rs (no JVM jars).

Each committed diffcdc version with changes becomes exactly one Delta commit: a first load (or a
full image) is one write, later versions one MERGE of the change set on the key columns
(update, delete, insert), so ``load_cdf`` of that commit shows ``insert``, ``delete`` (the full
old row) and ``update_preimage``/``update_postimage`` pairs. Exactly once: every commit carries
the application transaction ``(diffcdc:<table>, <diffcdc version>)``; publishing a version the
table already records is a no-op, whatever crashed in between. The application id carries
the sink's *incarnation* (a new one each time the sink starts from a full image), so a table
re-created from scratch (``diffcdc drop``, a new state) never inherits an old version number.

Before each version the sink checks that the table is where it left it: the newest commit
that changes data is its own last one (a foreign write, delete, ``RESTORE`` or schema change
is refused), the table still exists once it published rows, and its change data feed is on.
A refused target is recovered with ``diffcdc reload --table T --sink NAME``.

With ``mode = "scd2"`` the table is a history instead (:mod:`diffcdc.sinks.delta.history`):
the same change set, exactly once the same way, merged as closed and opened rows.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyspark.sql import SparkSession

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.column_changes import CHANGED_COLUMNS, partners
from diffcdc.core.compare import Replayed
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
from diffcdc.sinks.delta.feed import CHANGE_COLUMNS, append_changelog, plain_types
from diffcdc.sources.snapshot_time import format_time, read_time
from diffcdc.spark import spark_path
from diffcdc.storage import paths

CDF = {"delta.enableChangeDataFeed": "true"}
#: Columns of the changelog table that tell diffcdc's versions and the table's incarnations
#: apart (a re-created Delta table restarts ``_commit_version`` at 0).
CHANGELOG_COLUMNS = ("_diffcdc_version", "_diffcdc_incarnation")
#: Commits of table maintenance that change no data (another engine's OPTIMIZE or VACUUM).
MAINTENANCE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END"})


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
        try:
            return DeltaTable(path or self.config.path, storage_options=self.config.storage_options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise self._error(f"cannot open the Delta table: {exc}", path) from None

    def _error(self, message: str, path: str | None = None) -> StorageError:
        text = " ".join(message.split())
        damaged = any(w in text for w in ("not found", "No such file", "missing file"))
        hint = ("the table lost files diffcdc wrote: " + self._damaged_hint() if damaged
                else "check the path and its storage options, then run again")
        return StorageError(text[:1000], table=self.table.name, path=path or self.config.path,
                            hint=hint)

    def _damaged_hint(self) -> str:
        """What to do about a table that lost data files."""
        if self.history:  # a full image would only be added to a damaged history
            return ("restore them (RESTORE the Delta table to a version that has them, or the "
                    "files from a backup), or move the table away and start a new history "
                    f"with '{self.reload_command()}'")
        return f"replace the table with a full image: '{self.reload_command()}'"

    def check(self, history: SinkHistory) -> None:
        self._verify(list(history.manifests))

    def _verify(self, published: list[tuple[int, dict[str, Any]]]) -> DeltaTable | None:
        """Refuse a table that is not where this sink left it after ``published`` (its
        versions before the one at hand, all published); return the table (None: none yet)."""
        table = self._open()
        problem = self._mode_problem(table) if table is not None else None
        if problem is not None:
            raise problem
        with_rows = [(v, m) for v, m in published if m.get("rows")]
        if not with_rows:
            if table is not None:
                raise self._mismatch(
                    "a Delta table that this diffcdc table did not publish to is at the path",
                    "point the sink at a new path or remove that table, or replace it with a "
                    f"full image: '{self.reload_command()}'",
                )
            return None
        version, manifest = with_rows[-1]
        if table is None:
            raise self._mismatch(
                f"the Delta table is gone (it held diffcdc version {version})",
                f"publish a full image to it again: '{self.reload_command()}'",
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

    def _foreign_commit(self, table: DeltaTable, version: int, manifest: dict[str, Any]
                        ) -> str | None:
        """The newest commit that changes data, described, when it is not this sink's commit
        of ``version`` (maintenance such as OPTIMIZE or VACUUM is skipped); None when it is."""
        app = self.app_id(manifest)
        for entry in table.history(limit=100):
            operation = str(entry.get("operation", ""))
            if operation in MAINTENANCE:
                continue
            ours = (str(entry.get("diffcdc.version")) == str(version)
                    and entry.get("diffcdc.incarnation") == manifest.get("incarnation")
                    and entry.get("diffcdc.table") in (None, self.table.name))
            if ours:
                return None
            return f"{entry.get('version')} ({operation or 'unknown operation'})"
        # Only maintenance in the newest 100 commits: the application transaction decides.
        if (table.transaction_version(app) or 0) == version:
            return None
        return f"{table.version()} (not diffcdc's)"

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
        manifest = {"target": self.config.path, "changelog": self.config.changelog_path,
                    "recreate": changes.recreate is not None, "keys": list(changes.table.keys),
                    "incarnation": incarnation}
        if self.history:
            assert changes.snapshot_time is not None  # accept() refused a version without
            manifest.update(mode="scd2", valid_from=format_time(changes.snapshot_time),
                            track=self.config.track_history_columns,
                            track_except=self.config.track_history_except_columns or [])
        return manifest

    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory
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
                table = self._verify([(v, m) for v, m in history.manifests if v < version])
            elif table is not None and (problem := self._mode_problem(table)) is not None:
                raise problem
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
                    self.config.path, data.drop_columns([OP]),
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
            write_deltalake(self.config.path, scd2.image_rows(data.drop_columns([OP]), at),
                            mode="error", storage_options=self.config.storage_options,
                            commit_properties=props)
            return
        target = [f.name for f in table.schema().fields]
        skip = {c.lower() for c in (*keys, *self.table.exclude, *scd2.HISTORY_COLUMNS, OP)}
        compared = [c for c in dict.fromkeys([*data.column_names, *target])
                    if c.lower() not in skip]
        tracking = scd2.Tracking(
            tuple(manifest["track"]) if manifest.get("track") is not None else None,
            tuple(manifest.get("track_except") or ()))
        if manifest.get("initial"):  # a full image onto the history: what differs from it
            image = data.drop_columns([OP])
            current = plain_types(scd2.open_rows(table, keys, None))
            gone_rows = [i for i, j in enumerate(partners(current, image, keys)) if j is None]
            gone = current.take(scd2.row_indices(gone_rows)).select(keys)
            source = scd2.merge_source(image, gone, current, keys, compared, tracking, at,
                                       unchanged_possible=True)
        else:
            op = data.column(OP)
            updates = data.filter(pc.equal(op, OP_UPDATE))
            current = plain_types(scd2.open_rows(table, keys, updates))
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
            table.merge(data, predicate=on, source_alias="s", target_alias="t",
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
            data = plain_types(table.to_pyarrow_table())
            if self.history:
                data = data.filter(pc.is_null(data.column(scd2.END_AT)))
                data = data.drop_columns(list(scd2.HISTORY_COLUMNS))
            rows, columns = data.to_pylist(), data.column_names
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
