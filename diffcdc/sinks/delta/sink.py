"""A Delta table whose change data feed is the diff, written with delta-rs (no JVM jars).

Each committed diffcdc version with changes becomes exactly one Delta commit: a first load (or a
full image) is one write, later versions one MERGE of the change set on the key columns
(update, delete, insert), so ``load_cdf`` of that commit shows ``insert``, ``delete`` (the full
old row) and ``update_preimage``/``update_postimage`` pairs. Exactly once: every commit carries
the application transaction ``(diffcdc:<table>, <diffcdc version>)``; publishing a version the
table already records is a no-op, whatever crashed in between. The application id carries
the sink's *incarnation* (a new one each time the sink starts from a full image), so a table
re-created from scratch (``diffcdc drop``, a new state) never inherits an old version number.

Before each version the sink checks that the table is where it left it, and it writes a first
image only to a path that holds no Delta table: :mod:`diffcdc.sinks.delta.target_check`. A
refused target is recovered with ``diffcdc reload --table T --sink NAME``.

With ``mode = "scd2"`` the table is a history instead (:mod:`diffcdc.sinks.delta.history`):
the same change set, exactly once the same way, merged as closed and opened rows.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql import SparkSession

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.column_changes import CHANGED_COLUMNS, partners
from diffcdc.core.compare import Replayed, arrow_rows
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.core.sql import quote
from diffcdc.errors import ConfigError, DiffcdcError, InputRefused
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
from diffcdc.sinks.delta.target_check import DeltaTarget, commits
from diffcdc.sinks.history_settings import Tracking, refuse_tracked_columns
from diffcdc.sources.snapshot_time import format_time, read_time
from diffcdc.storage import paths

CDF = {"delta.enableChangeDataFeed": "true"}
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
        #: The history's layout as configured (its column names, open end, tombstones).
        self.layout = config.history_layout() if self.history else scd2.DEFAULT
        if self.history:
            self.reserved_columns = (*self.layout.columns, *CHANGE_COLUMNS, *CHANGELOG_COLUMNS)
        elif config.changelog_path:
            self.reserved_columns = (*CHANGE_COLUMNS, *CHANGELOG_COLUMNS, CHANGED_COLUMNS)
        #: The table (and changelog table) as this sink finds it: opened, checked, its failures
        #: in words.
        self.target = DeltaTarget(sink_id, table, config, self.reload_command())
        #: Whether this run's check refused the target (another writer changed it).
        self._target_refused = False

    def describe(self) -> dict[str, Any]:
        described = {"type": self.type, "target": self.config.path,
                     "changelog": self.config.changelog_path, "mode": self.config.mode}
        if self.layout != scd2.DEFAULT:  # (a default history is described as before)
            described["layout"] = self.layout.describe()
        return described

    def accept(self, changes: ChangeSet) -> None:
        self.target.refuse_file(self.config.path)
        if self.config.changelog_path:
            self.target.refuse_file(self.config.changelog_path)
        if not self.history:
            return
        if changes.snapshot_time is None:
            raise InputRefused("the snapshot has no as-of time for the history sink",
                               table=self.table.name, snapshot=changes.snapshot_id,
                               hint="give run_dataframe a snapshot_time")
        refuse_tracked_columns(self.id, self.config.tracking(), changes.columns,
                               self.table.keys, table=self.table.name,
                               snapshot=changes.snapshot_id, exclude=self.table.exclude)
        self._accept_open_end(changes)
        if self._target_refused and not changes.initial:
            # this run's check refused the table already (the sink publishes nothing in this
            # run, the others go on): its mode and layout are what another writer left, so
            # they are no config change to refuse the whole run for
            return
        table = self.target.open()
        # a continuing sink's table passed this run's check, its mode among it (by the mode
        # its versions were made with); a full image goes onto whatever is at the path
        problem = self.target.mode_problem(table) if table is not None and changes.initial \
            else None
        if problem is not None:
            raise problem
        self._accept_layout(changes, table)

    def _accept_layout(self, changes: ChangeSet, table: DeltaTable | None) -> None:
        """Refuse a layout the history cannot take: another one than the history was made
        with (unless this version starts the sink from a full image, which rebuilds it)."""
        made = scd2.table_layout(table) if table is not None else None
        if table is not None and made is not None and made != self.layout and changes.initial:
            # the rebuild keeps every column the history holds: one the new layout names too
            # (a column the snapshots dropped, kept as NULL) is refused before the commit
            names = {c.lower() for c in self.layout.columns}
            clash = [f.name for f in table.schema().fields
                     if f.name not in made.columns and f.name.lower() in names]
            if clash:
                raise ConfigError(
                    f"sink {self.id}: the history holds column(s) {clash} that the new layout "
                    f"names ({self.layout.describe()})",
                    table=self.table.name, path=self.config.path,
                    hint="name the history columns apart from the history's columns "
                         "(history_columns), then run again",
                )
        if made is not None and made != self.layout and not changes.initial:
            raise ConfigError(
                f"sink {self.id}: the history was made with {made.describe()} but the sink "
                f"now has {self.layout.describe()}: an existing history keeps its layout",
                table=self.table.name, path=self.config.path,
                hint="set deletes / history_columns / open_end back, or rebuild the history "
                     f"with the new layout: '{self.reload_command()}'",
            )

    def _accept_open_end(self, changes: ChangeSet) -> None:
        """Refuse open-end sentinels the version reaches (whatever the table: a version
        staged now is published with them later)."""
        end = self.layout.open_end
        assert changes.snapshot_time is not None
        if end.end_at is not None and end.end_at <= changes.version:
            raise ConfigError(
                f"sink {self.id}: open_end.end_at {end.end_at} is not above version "
                f"{changes.version}: an open row could not be told from a closed one",
                table=self.table.name, path=self.config.path,
                hint="give a larger sentinel, e.g. 9223372036854775807",
            )
        if end.valid_to is not None and end.valid_to <= changes.snapshot_time:
            raise ConfigError(
                f"sink {self.id}: open_end.valid_to {format_time(end.valid_to)} is not after "
                f"the snapshot's time {format_time(changes.snapshot_time)}",
                table=self.table.name, path=self.config.path,
                hint="give a far-future sentinel, e.g. \"9999-12-31T00:00:00Z\"",
            )

    def check(self, history: SinkHistory) -> None:
        self._verify(history, files=True)

    def quick_check(self, history: SinkHistory) -> None:
        """The table's log only: its files are listed once per version, before the commit."""
        self._verify(history, files=False)

    def _verify(self, history: SinkHistory, *, files: bool) -> None:
        """The target check, remembered when it refuses (see :meth:`accept`)."""
        self._target_refused = False
        try:
            self.target.verify(list(history.manifests), files=files)
        except Exception:
            self._target_refused = True
            raise

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        # a full image of an empty snapshot is staged (its schema, no rows) and committed: the
        # table is emptied (a history: every open row closed), not left with its old rows
        empty_image = changes.initial and not changes.rows
        if changes.rows or empty_image:
            changes.write_staged(staging_dir)
        incarnation = history.incarnation(changes)
        try:  # the table this version continues (recorded while it is there)
            table = self.target.open()
        except DiffcdcError:  # unreachable: the sink fails on its own at publish
            table = None
        manifest = {"target": self.config.path, "changelog": self.config.changelog_path,
                    "recreate": changes.recreate is not None, "keys": list(changes.table.keys),
                    "incarnation": incarnation,
                    "table_id": table.metadata().id if table is not None else None,
                    # the columns a change is not listed for (the history: not compared), as
                    # they were when the version was staged
                    "exclude": list(self.table.exclude)}
        if empty_image:  # recorded: a manifest staged before it had no commit for it
            manifest["empty_image"] = True
        if self.history:
            assert changes.snapshot_time is not None  # accept() refused a version without
            manifest.update(mode="scd2", valid_from=format_time(changes.snapshot_time),
                            **self.config.tracking().record(), layout=self.layout.record())
        return manifest

    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory,
        *, checked: bool = False,
    ) -> None:
        if not commits(manifest):
            return  # a version without changes (not a full image) makes no Delta commit
        if (manifest.get("mode") == "scd2") != self.history:
            raise ConfigError(
                f"sink {self.id}: version {version} was staged for mode = "
                f"\"{manifest.get('mode', 'current')}\" but the sink now has mode = "
                f"\"{self.config.mode}\"",
                table=self.table.name, path=self.config.path,
                hint="set the mode back until the version is published, or give the new mode "
                     "its own sink and path",
            )
        table = self.target.open()
        app = self.target.app_id(manifest)
        if table is None or (table.transaction_version(app) or 0) < version:
            if not manifest.get("initial"):
                # Right before the MERGE (protects the target): a commit of another writer since
                # the check before this version's commit (the state's hashing and the other
                # sinks' publishing came in between), or since a run long ago for a version
                # published late. ``checked``: the files were listed at that check, the log is
                # read again.
                table = self.target.verify([(v, m) for v, m in history.manifests if v < version],
                                           files=not checked)
            elif table is not None and (problem := self.target.mode_problem(table)) is not None:
                raise problem
            elif table is not None and not manifest.get("recreate"):
                # a first image (a first load, a sink added) onto a table that appeared after
                # the check, or was refused by it: never overwritten unless asked (reload)
                raise self.target.not_ours(table)
            elif not manifest.get("recreate"):
                self.target.claim_changelog()
            if manifest.get("initial"):
                self.target.check_kept(table, version, os.path.join(staging_dir, "changes"))
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
            app_transactions=[Transaction(self.target.app_id(manifest), version)],
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
            raise self.target.error(f"Delta commit of version {version} failed: {exc}") from None

    def _commit_history(self, table: DeltaTable | None, version: int, manifest: dict[str, Any],
                        data: pa.Table, props: CommitProperties) -> None:
        """Version ``version`` into the history table (see :mod:`diffcdc.sinks.delta.history`)."""
        at = scd2.Version(version, read_time(str(manifest["valid_from"])))
        keys = list(manifest["keys"])
        layout = HistoryLayout.from_record(manifest.get("layout"))  # none: main's earlier
        options = self.config.storage_options
        if table is None:  # the first load: every row opened
            rows = scd2.image_rows(data.drop_columns([OP]), at, layout)
            write_deltalake(self.config.path, unsliced(rows), mode="error",
                            storage_options=self.config.storage_options,
                            commit_properties=props)
            return
        made = scd2.table_layout(table)
        if made != layout:
            if not manifest.get("initial"):  # accept() refused it: the table changed since
                raise self.target.mismatch(
                    f"the history's layout ({made.describe() if made else 'none'}) is not the "
                    f"one version {version} was staged for ({layout.describe()})",
                    f"rebuild the history with a full image: '{self.reload_command()}'")
            table = self._convert(table, made or scd2.DEFAULT, layout, keys, version)
            crash_point("delta_history_converted", scope=self.id)
        newest = scd2.newest_valid_from(table, options, layout)
        if newest is not None and newest > at.valid_from:  # never a row valid before it opens
            raise self.target.mismatch(
                f"the history holds rows valid from {format_time(newest)}, after the as-of time "
                f"{format_time(at.valid_from)} of version {version} (a snapshot time in the "
                "future was committed)",
                "RESTORE the Delta table to its version before those rows, or move it away, then "
                f"'{self.reload_command()}'",
            )
        target = [f.name for f in table.schema().fields]
        # compared without the columns excluded when it was staged (an older manifest: the
        # table's), with the tracking it was staged with
        excluded = manifest.get("exclude", self.table.exclude)
        skip = {c.lower() for c in (*keys, *excluded, *layout.columns, OP)}
        compared = [c for c in dict.fromkeys([*data.column_names, *target])
                    if c.lower() not in skip]
        tracking = Tracking.from_manifest(manifest)
        if manifest.get("initial"):  # a full image onto the history: what differs from it
            image = data.drop_columns([OP])
            current = plain_types(scd2.open_rows(table, keys, None, options, layout))
            copies, differ = scd2.copied_open_rows(current, keys)
            if differ:  # which of them diffcdc wrote cannot be told
                raise self.target.mismatch(
                    f"the history has {len(differ)} key(s) with several open rows that differ "
                    f"(e.g. {', '.join(f'{k}={v!r}' for k, v in zip(keys, differ[0]))}): "
                    "another writer's rows",
                    "RESTORE the Delta table to its version before that writer's commit, or "
                    f"move it away, then '{self.reload_command()}'",
                )
            if copies.num_rows:  # another writer's exact copies: removed in a commit first
                scd2.remove_copies(table, copies, keys, CommitProperties(custom_metadata={
                    "diffcdc.table": self.table.name,
                    "diffcdc.repair": f"copies of open rows removed before version {version}"}),
                    layout)
                table = self.target.open()
                assert table is not None
                current = plain_types(scd2.open_rows(table, keys, None, options, layout))
            live = current
            if layout.deleted is not None:  # a key already deleted stays so
                live = current.filter(pc.invert(pc.fill_null(current.column(layout.deleted),
                                                             False)))
            gone_rows = [i for i, j in enumerate(partners(live, image, keys)) if j is None]
            gone = live.take(scd2.row_indices(gone_rows)).select(keys)
            source = scd2.merge_source(image, gone, current, keys, compared, tracking, at,
                                       unchanged_possible=True, layout=layout)
        else:
            op = data.column(OP)
            updates = data.filter(pc.equal(op, OP_UPDATE))
            # with tombstones: the open rows of every key of the version (a delete's last
            # values, an insert's tombstone)
            current = plain_types(scd2.open_rows(
                table, keys, data if layout.deleted is not None else updates, options, layout))
            self._refuse_missing_rows(version, updates, data.filter(pc.equal(op, OP_DELETE)),
                                      current, keys, layout)
            # An update may repeat the open row's values: a scoped table's kept key next held
            # after a re-fingerprint is an update (docs/normalizers.md), whatever its values;
            # so is a row whose excluded columns alone changed, in the version that excludes
            # them. Restated in place (no row opened), as the current mode applies it.
            source = scd2.merge_source(
                data.filter(pc.not_equal(op, OP_DELETE)).drop_columns([OP]),
                data.filter(pc.equal(op, OP_DELETE)).select(keys), current, keys, compared,
                tracking, at, unchanged_possible=True, layout=layout, restate_unchanged=True)
        if source.num_rows:
            scd2.merge(table, source, keys, at, props, layout)
        else:  # nothing differs: the version is still recorded, by an empty commit
            write_deltalake(self.config.path, pa.schema(table.schema().to_arrow()).empty_table(),
                            mode="append", storage_options=self.config.storage_options,
                            commit_properties=props)

    def _refuse_missing_rows(self, version: int, updates: pa.Table, deletes: pa.Table,
                             current: pa.Table, keys: list[str], layout: HistoryLayout) -> None:
        """Refuse a version whose updated keys (with tombstones: deleted keys too) have no
        live open row in the history."""
        live = current
        if layout.deleted is not None:
            live = current.filter(pc.invert(pc.fill_null(current.column(layout.deleted), False)))
        missing = any(j is None for j in partners(updates, live, keys))
        what = "updates"
        if not missing and layout.deleted is not None:
            missing, what = any(j is None for j in partners(deletes, live, keys)), "deletes"
        if missing:
            raise self.target.mismatch(
                f"the history has no open row for a key version {version} {what}",
                f"replace the table's current rows with a full image: "
                f"'{self.reload_command()}'",
            )

    def _convert(self, table: DeltaTable, made: HistoryLayout, layout: HistoryLayout,
                 keys: list[str], version: int) -> DeltaTable:
        """The whole history rewritten in ``layout`` (one commit, before version
        ``version``'s full image is merged): a reload with changed history settings."""
        rows = plain_types(files_dataset(table, self.config.storage_options).to_table())
        try:
            converted = scd2.convert(rows, keys, made, layout)
        except ValueError as exc:
            raise self.target.mismatch(
                f"the history cannot take the new layout: {exc}",
                "name the history columns apart from the table's columns, then run again",
            ) from None
        write_deltalake(
            self.config.path, unsliced(converted), mode="overwrite", schema_mode="overwrite",
            storage_options=self.config.storage_options,
            commit_properties=CommitProperties(custom_metadata={
                "diffcdc.table": self.table.name,
                "diffcdc.repair": f"history layout changed before version {version}: "
                                  f"{layout.describe()}"}))
        reopened = self.target.open()
        assert reopened is not None
        return reopened

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
        table = self.target.open()
        assert table is not None
        app = f"{self.target.app_id(manifest)}:changelog"
        log = self.target.open(self.config.changelog_path)
        if log is not None and (log.transaction_version(app) or 0) >= version:
            return
        try:
            image = self._staged(staged).drop_columns([OP]) if manifest.get("initial") else None
            append_changelog(table, version, self.config.changelog_path or "", app,
                             self.config.storage_options,
                             incarnation=str(manifest.get("incarnation") or ""), image=image,
                             keys=list(manifest["keys"]),
                             exclude=manifest.get("exclude", self.table.exclude))
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exception too
            raise self.target.error(f"changelog append of version {version} failed: {exc}",
                              self.config.changelog_path) from None

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        if not commits(manifest):
            return True
        table = self.target.open()
        return table is not None and (
            table.transaction_version(self.target.app_id(manifest)) or 0) >= version

    def replay(self, spark: SparkSession) -> Replayed:
        """The table's rows (a history: its open rows, without the validity columns)."""
        table = self.target.open()
        rows, columns = [], []
        if table is not None:
            # read from its files: a date before year 1 or after 9999 stays exact (Day)
            data = plain_types(files_dataset(table, self.config.storage_options).to_table())
            layout = scd2.table_layout(table) if self.history else None
            if layout is not None:  # its own layout (a rebuild may be pending)
                data = data.filter(scd2.live_open_mask(data, layout))
                data = data.drop_columns([c for c in layout.columns if c in data.column_names])
            rows, columns = arrow_rows(data), data.column_names
        return Replayed(list(self.table.keys), columns, rows,
                        units=(table.version() + 1) if table is not None else 0)
