"""A SQL table kept equal to the snapshots, one transaction per diffcdc version, on any server
a :class:`~diffcdc.sinks.sql.dialect.Dialect` speaks for (PostgreSQL:
:class:`diffcdc.sinks.postgres.sink.PostgresSink`).

``stage`` writes the change set as Parquet under the version's staging folder (nothing touches
the server). ``publish`` checks the target (:mod:`diffcdc.sinks.sql.target_check`), bulk-loads
the staged rows into a staging table (named from the target and the version, dropped
afterwards) and then, in ONE transaction, applies them (the dialect's current-mode or history
statements) and inserts the version's bookkeeping row (:mod:`diffcdc.sinks.sql.bookkeeping`),
whose primary key makes a second apply of the version fail inside that transaction. A
republish after a kill anywhere finds the row and does nothing; before the COMMIT nothing of
the version is visible. A full image (a first load, a reload, a re-created table, also of an
empty snapshot) is loaded into a new table with the primary key on the keys, which takes the
target's place in the transaction that records it. The kill points are
``<kind>_copied``, ``<kind>_before_commit`` and ``<kind>_committed`` (kind: the dialect's
sink type, e.g. ``postgres_copied``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from diffcdc.core.changeset import OP
from diffcdc.core.compare import Replayed
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.errors import ConfigError, DiffcdcError, InputRefused
from diffcdc.faults import crash_point
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.history_settings import Tracking, refuse_tracked_columns
from diffcdc.sinks.sql import bookkeeping
from diffcdc.sinks.sql.dialect import Dialect, SqlSinkSettings
from diffcdc.sinks.sql.records import Applied, Expected, Target
from diffcdc.sinks.sql.target_check import TargetCheck
from diffcdc.sources.snapshot_time import format_time, read_time


def applies(manifest: dict[str, Any]) -> bool:
    """Whether a version writes to the target: it has changes, or it is a full image (also of
    an empty snapshot: the table is emptied)."""
    return bool(manifest.get("rows")) or bool(manifest.get("initial"))


def _columns_since_image(history: SinkHistory, version: int) -> dict[str, list[T.DataType]]:
    """The columns (and their types) of the versions the sink applied since its last full
    image, before ``version``: the ones the target table must hold as the sink made them."""
    applied = [m for v, m in history.manifests if v < version and applies(m)]
    starts = [i for i, m in enumerate(applied) if m.get("initial")]
    out: dict[str, list[T.DataType]] = {}
    for manifest in applied[starts[-1] if starts else 0:]:
        if "schema" not in manifest:
            continue
        for f in T.StructType.fromJson(json.loads(manifest["schema"])).fields:
            out.setdefault(f.name, []).append(f.dataType)
    return out


class SqlSink(Sink):
    """The table ``schema.table`` on the configured server, in the dialect's SQL."""

    def __init__(self, sink_id: str, table: SinkTable, config: SqlSinkSettings,
                 dialect: Dialect) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.dialect = dialect
        self.history = config.mode == "scd2"
        self.needs_snapshot_time = self.history
        self.layout = config.history_layout() if self.history else HistoryLayout()
        if self.history:
            self.reserved_columns = self.layout.columns
        name = config.table_name(table.name)
        problem = dialect.table_name_problem(name)
        if problem is not None:
            raise ConfigError(f"sink {sink_id}: the {dialect.names.title} table name {name!r} "
                              f"{problem}", table=table.name,
                              hint="give the sink a shorter `table` name of its own")
        self.target: Target = (config.db_schema, name)
        self.checks = TargetCheck(sink_id, table.name, self.target, config.where(),
                                  self.reload_command(), dialect)
        #: The schema of the snapshot verify compares the table with (:meth:`comparable`).
        self._compared: T.StructType | None = None

    def _kill_point(self, step: str) -> None:
        """The kill point ``<kind>_<step>`` (``postgres_copied``) of the sink."""
        crash_point(f"{self.dialect.names.kind}_{step}", scope=self.id)

    # -- the server ---------------------------------------------------------------------
    @property
    def where(self) -> str:
        return f"sink {self.id}"

    @contextmanager
    def _session(self, what: str) -> Iterator[Any]:
        """An open connection (closed afterwards); a server failure while doing ``what`` as
        one line."""
        conn = self.dialect.connect(self.where)
        try:
            yield conn
        except Exception as exc:
            error = self.dialect.server_error(
                exc, self.where, what, "check the server and the sink's settings, then run "
                "again (a version is committed once or not at all)")
            if error is None:
                raise
            raise error from None
        finally:
            conn.close()

    def describe(self) -> dict[str, Any]:
        found = {"type": self.type, "target": f"{self.target[0]}.{self.target[1]}",
                 "server": self.config.where(), "mode": self.config.mode}
        if self.history:
            found["layout"] = self.layout.describe()
        return found

    # -- before the commit --------------------------------------------------------------
    def accept(self, changes: ChangeSet) -> None:
        if self.history and changes.snapshot_time is None:
            raise InputRefused("the snapshot has no as-of time for the history sink",
                               table=self.table.name, snapshot=changes.snapshot_id,
                               hint="give run_dataframe a snapshot_time")
        if self.history:
            refuse_tracked_columns(self.id, self.config.tracking(), changes.columns,
                                   self.table.keys, table=self.table.name,
                                   snapshot=changes.snapshot_id, exclude=self.table.exclude)
        # a name the server would not keep, or a type it cannot hold losslessly: refused
        self.dialect.check_columns(changes.schema, self._where_table)

    def _expected(self, history: SinkHistory, before: int | None = None) -> Expected:
        """Where the sink left the table after its versions (before ``before``)."""
        applied = [(v, m) for v, m in history.manifests
                   if (before is None or v < before) and applies(m)]
        if not applied:
            return Expected(None, None)
        version, manifest = applied[-1]
        return Expected(version, manifest.get("incarnation"))

    def check(self, history: SinkHistory) -> None:
        with self._session("checking the target table") as conn, conn.cursor() as cursor:
            self.checks.verify(cursor, self._expected(history))

    def quick_check(self, history: SinkHistory) -> None:
        """The bookkeeping row and the table's identity; the row count waits for ``check``."""
        with self._session("checking the target table") as conn, conn.cursor() as cursor:
            self.checks.verify(cursor, self._expected(history), count=False)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        if changes.rows:
            changes.write_staged(staging_dir)
        incarnation = history.incarnation(changes)
        manifest = {"target": f"{self.target[0]}.{self.target[1]}",
                    "server": self.config.where(), "mode": self.config.mode,
                    "keys": list(changes.table.keys), "incarnation": incarnation,
                    "recreate": changes.recreate is not None,
                    "inserted": changes.inserted, "updated": changes.updated,
                    "deleted": changes.deleted, "schema": changes.schema.json()}
        if self.history:
            assert changes.snapshot_time is not None  # accept() refused a version without
            manifest.update(valid_from=format_time(changes.snapshot_time),
                            layout=self.layout.record(), **self.config.tracking().record(),
                            exclude=list(self.table.exclude))
        return manifest

    # -- publishing ---------------------------------------------------------------------
    def publish(
        self, version: int, manifest: dict[str, Any], staging_dir: str, history: SinkHistory,
        *, checked: bool = False,
    ) -> None:
        if not applies(manifest):
            return  # a version without changes (not a full image) writes nothing
        if (manifest.get("mode", "current") == "scd2") != self.history:
            raise ConfigError(
                f"sink {self.id}: version {version} was staged for mode = "
                f"\"{manifest.get('mode', 'current')}\" but the sink now has mode = "
                f"\"{self.config.mode}\"", table=self.table.name,
                hint="set the mode back until the version is published, or give the new mode "
                     "its own sink and table")
        staged = os.path.join(staging_dir, "changes")
        with self._session(f"publishing version {version}") as conn:
            with conn.cursor() as cursor:
                done = bookkeeping.applied_version(self.dialect, cursor, self.target, version)
            conn.commit()
            if done is not None and done.incarnation == manifest.get("incarnation"):
                # applied before a kill: nothing twice; the staging table a kill after the
                # COMMIT left is dropped
                self._drop(conn, self._work_table("stage", version, manifest))
                return
            if manifest.get("initial") and not self.history:
                self._full_image(conn, version, manifest, staged)
            else:
                self._changes(conn, version, manifest, staged,
                              None if manifest.get("initial")
                              else self._expected(history, before=version),
                              _columns_since_image(history, version))

    def _schema(self, manifest: dict[str, Any]) -> T.StructType:
        return T.StructType.fromJson(json.loads(manifest["schema"]))

    def _work_table(self, kind: str, version: int, manifest: dict[str, Any]) -> Target:
        """A table of the sink's own next to the target (≤ 63 bytes whatever the target's
        name): ``_diffcdc_<kind>_<hash of target, incarnation, version>``."""
        digest = hashlib.sha1(json.dumps(
            [*self.target, manifest.get("incarnation"), version]).encode()).hexdigest()[:16]
        return self.target[0], f"_diffcdc_{kind}_{digest}"

    def _copy(self, staged: str, into: Target, columns: list[str], rows: int) -> None:
        if not rows:
            return
        loaded = self.dialect.bulk_load(self._loader(staged), staged, into, columns,
                                        self.where)
        if loaded != rows:
            raise DiffcdcError(f"{self.where}: {self.dialect.names.bulk} loaded {loaded} rows "
                               f"into {into[0]}.{into[1]}, the version has {rows}",
                               table=self.table.name,
                               hint="run again (nothing of the version was committed)")

    @staticmethod
    def _loader(staged: str) -> SparkSession | None:
        """Where staged rows are loaded from: small inputs from this process (publishing needs
        no Spark, as the other sinks': a Spark Connect server gone after the commit does not
        stop it), larger ones from the executors in parallel."""
        from diffcdc.staged_files import IN_PROCESS_BYTES
        from diffcdc.storage import paths

        if sum(f.size for f in paths.data_file_infos(staged)) <= IN_PROCESS_BYTES:
            return None
        return SparkSession.active()

    def _full_image(self, conn: Any, version: int, manifest: dict[str, Any], staged: str) -> None:
        """A new table with the image's rows and the primary key takes the target's place in
        the transaction that records the version."""
        schema = self._schema(manifest)
        keys = list(manifest["keys"])
        new = self._work_table("new", version, manifest)
        with conn.cursor() as cursor:
            exists = self._prepare(cursor, manifest, None)
            cursor.execute(self.dialect.drop_if_exists(new))
            cursor.execute(self.dialect.create_image(new, schema, self._where_table))
        conn.commit()
        self._copy(staged, new, schema.fieldNames(), int(manifest.get("rows") or 0))
        self._kill_point("copied")
        with conn.cursor() as cursor:
            for statement in self.dialect.finish_image(new, keys):
                cursor.execute(statement)
            if exists:
                cursor.execute(self.dialect.lock(self.target))
            for statement in self.dialect.swap(self.target, new[1], exists):
                cursor.execute(statement)
            self._record(cursor, version, manifest, initial=True,
                         count=int(manifest.get("rows") or 0))
            self._kill_point("before_commit")
        conn.commit()
        self._kill_point("committed")

    @property
    def _where_table(self) -> str:
        return f"sink {self.id}, table {self.target[0]}.{self.target[1]}"

    def _prepare(self, cursor: Any, manifest: dict[str, Any], expected: Expected | None) -> bool:
        """Before a version's load: the schema and bookkeeping table made; a first image
        (``expected`` None) refused onto a table that is not ours, a later version onto a
        table that is not where the sink left it (its row count waits for the transaction).
        Whether the target table exists."""
        bookkeeping.prepare(self.dialect, cursor, self.target[0])
        exists = self.dialect.table_identity(cursor, self.target) is not None
        if expected is None:
            if exists and not manifest.get("recreate"):
                # a first image (a first load, a sink added) onto a table that is not ours
                raise self.checks.not_ours()
        else:
            self.checks.verify(cursor, expected, count=False)
        if exists and self.history:
            self._refuse_other_layout(cursor)
        return exists

    def _refuse_other_layout(self, cursor: Any) -> None:
        """A history made with another layout (or a table that is no history) is refused."""
        try:
            cursor.execute(self.dialect.history_layout_query(self.target, self.layout.start_at))
            row = cursor.fetchone()
        except Exception:  # noqa: BLE001 - the row's absence says it: rolled back below
            row = None
        made = row[0] if row else None
        if made != self.layout.text():
            cursor.connection.rollback()
            raise self.checks.mismatch(
                f"the table is not a history of the sink's layout ({self.layout.describe()}): "
                "an existing history keeps its layout")

    def _record(self, cursor: Any, version: int, manifest: dict[str, Any], *, initial: bool,
                count: int) -> None:
        """The version's bookkeeping row (a full image first forgets the rows before it)."""
        identity = self.dialect.table_identity(cursor, self.target)
        assert identity is not None
        if initial:
            cursor.execute(self.dialect.bookkeeping_forget(self.target[0], self.target[1]))
        cursor.execute(self.dialect.bookkeeping_insert(
            self.target[0], self.target[1], self.table.name, Applied(
                version, str(manifest.get("incarnation")), self.id,
                int(manifest.get("inserted", 0)), int(manifest.get("updated", 0)),
                int(manifest.get("deleted", 0)), count, identity)))

    def _load_stage(self, stage: Target, schema: T.StructType, manifest: dict[str, Any],
                    staged: str, conn: Any) -> None:
        """The staging table, created afresh, with the version's change rows."""
        with conn.cursor() as cursor:
            cursor.execute(self.dialect.drop_if_exists(stage))
            cursor.execute(self.dialect.create_staging(stage, schema, self._where_table))
        conn.commit()
        self._copy(staged, stage, [*schema.fieldNames(), OP], int(manifest.get("rows") or 0))

    def _drop(self, conn: Any, stage: Target) -> None:
        with conn.cursor() as cursor:
            cursor.execute(self.dialect.drop_if_exists(stage))
        conn.commit()

    def _changes(self, conn: Any, version: int, manifest: dict[str, Any], staged: str,
                 expected: Expected | None,
                 earlier: dict[str, list[T.DataType]] | None = None) -> None:
        """One version's change rows (a history: also a full image, as what differs from its
        open rows) applied in one transaction with its bookkeeping row."""
        schema = self._schema(manifest)
        keys = list(manifest["keys"])
        initial = expected is None
        with conn.cursor() as cursor:  # before the load: a target gone costs no load
            exists = self._prepare(cursor, manifest, expected)
        conn.commit()
        stage = self._work_table("stage", version, manifest)
        self._load_stage(stage, schema, manifest, staged, conn)
        self._kill_point("copied")
        columns = schema.fieldNames()
        try:
            with conn.cursor() as cursor:
                if exists:
                    cursor.execute(self.dialect.lock(self.target))
                if expected is not None:
                    self.checks.verify(cursor, expected)
                    before = self.checks.row_count(cursor)
                elif not exists:
                    cursor.execute(self.dialect.history_create(self.target, schema, keys,
                                                               self.layout))
                present = list(self.dialect.column_types(cursor, self.target))
                self._refuse_changed_columns(cursor, schema, earlier or {})
                if self.history:
                    self._refuse_case_renames(present, schema, version)
                for statement in self.dialect.add_columns(
                        self.target, [f for f in schema.fields if f.name not in present],
                        self._where_table):
                    cursor.execute(statement)
                self._follow_types(cursor, stage, version)
                if self.history:
                    self._apply_history(cursor, stage, schema, keys, version, manifest, initial,
                                        created=not exists)
                    after = self.checks.row_count(cursor)
                else:
                    self._apply_current(cursor, stage, columns, present, keys, manifest)
                    after = (before + int(manifest.get("inserted", 0))
                             - int(manifest.get("deleted", 0)))
                self._record(cursor, version, manifest, initial=initial, count=after)
                self._kill_point("before_commit")
            conn.commit()
        except Exception as exc:
            if not self.dialect.is_unique_violation(exc):
                raise
            conn.rollback()
            raise self.checks.mismatch(
                f"version {version} opens a key the table already holds "
                f"({' '.join(str(exc).split())[:300]})") from None
        self._kill_point("committed")
        self._drop(conn, stage)

    def _refuse_changed_columns(self, cursor: Any, schema: T.StructType,
                                earlier: dict[str, list[T.DataType]]) -> None:
        """A column of the snapshots a DBA dropped (ADD COLUMN would bring it back NULL in every
        row the version does not touch) or retyped (a narrower type would cut the values) is
        refused: the table is not where the sink left it."""
        found = self.dialect.column_types(cursor, self.target)
        away = (" (a history cannot get its past values back: move the history table away, "
                "e.g. ALTER TABLE … RENAME, then reload the sink: a new history starts)"
                if self.history else "")
        for f in schema.fields:
            if f.name not in found:
                if f.name in earlier:
                    raise self.checks.mismatch(
                        f"column {f.name!r} was dropped from the table{away}")
                continue
            allowed = {self.dialect.type_text(cursor, t, f"{self._where_table}, column {f.name}")
                       for t in [*earlier.get(f.name, []), f.dataType]}
            if found[f.name] not in allowed:
                raise self.checks.mismatch(
                    f"column {f.name!r} is {found[f.name]}, the sink made it "
                    f"{' or '.join(sorted(allowed))} (retyped by another writer){away}")

    def _refuse_case_renames(self, present: list[str], schema: T.StructType, version: int) -> None:
        """A history keeps every row it was given, so a column keeps its name there: a version
        (a re-creation under ``schema_policy = "recreate"``) spelling a column the history holds
        in another case only would be a second column beside it — the key's old spelling then
        holds every open row the new image cannot match (they would stay open) — so it is
        refused, as the Delta history refuses it."""
        held = {str(name).lower(): str(name) for name in present}
        renamed = [(held[f.name.lower()], f.name) for f in schema.fields
                   if f.name.lower() in held and held[f.name.lower()] != f.name]
        if renamed:
            said = ", ".join(f"{old!r} → {new!r}" for old, new in renamed)
            raise self.checks.mismatch(
                f"version {version} re-creates the table with columns the history cannot hold "
                f"({said}): it keeps every row it was given, so a column keeps its name there; "
                "move the history table away, e.g. ALTER TABLE … RENAME, then run again: a new "
                f"history starts with version {version}")

    def _follow_types(self, cursor: Any, stage: Target, version: int) -> None:
        """A column whose type the version changes (an all-NULL column typed at last, or a
        re-created table's retyped column): the table's column takes the new type when it
        holds only NULLs; else refused (the rows it holds cannot take the new type)."""
        staged = self.dialect.column_types(cursor, stage)
        held = self.dialect.column_types(cursor, self.target)
        skip = {OP, *self.dialect.work_columns}
        for name, kind in staged.items():
            if name in skip or name not in held or held[name] == kind:
                continue
            cursor.execute(self.dialect.count_not_null(self.target, name))
            if int(cursor.fetchone()[0]):
                raise self.checks.mismatch(
                    f"version {version} gives column {name!r} the type {kind}, and the table "
                    f"cannot hold it: its column is {held[name]} with values in it"
                    + (" (a history keeps every row it was given: move the history table "
                       "away, e.g. ALTER TABLE … RENAME, then run again: a new history starts "
                       f"with version {version})" if self.history else ""))
            cursor.execute(self.dialect.retype_when_null(self.target, name, kind))

    def _apply_history(self, cursor: Any, stage: Target, schema: T.StructType,
                       keys: list[str], version: int, manifest: dict[str, Any],
                       initial: bool, *, created: bool = False) -> None:
        """``created``: the history was made empty in this transaction (a first load: every
        staged row opens by one INSERT instead of being compared with open rows)."""
        at = read_time(str(manifest["valid_from"]))
        # a column of the history the version lacks (removed_columns = "null", a re-created
        # table's): NULL in the staging table, so it is compared and written NULL, as the
        # Delta history merges it
        held = self.dialect.column_types(cursor, self.target)
        names = schema.fieldNames()
        lacking = [c for c in held if c not in names and c not in self.layout.columns]
        for name in lacking:
            cursor.execute(self.dialect.add_column_as(stage, name, held[name]))
        names = [*names, *lacking]
        if not initial:
            cursor.execute(self.dialect.history_check(self.target, stage, keys, self.layout, at))
            missing, open_inserts, later = cursor.fetchone()
            found = [what for count, what in (
                (missing, f"{missing} key(s) it updates or deletes have no open row"),
                (open_inserts, f"{open_inserts} key(s) it inserts are open"),
                (later, f"{later} row(s) are valid from after its as-of time")) if count]
            if found:
                raise self.checks.mismatch(f"before version {version}: {'; '.join(found)}")
        # compared without the columns excluded when it was staged, with the tracking it was
        # staged with (an older manifest: the table's exclude)
        excluded = manifest.get("exclude", self.table.exclude)
        skip = {c.lower() for c in (*keys, *excluded, *self.layout.columns, OP)}
        compared = [c for c in names if c.lower() not in skip]
        tracking = Tracking.from_manifest(manifest)
        for statement in self.dialect.history_apply(
                self.target, stage, names, keys, self.layout, version, at,
                initial=initial, compared=compared, target_empty=initial and created,
                track_only=tracking.only, track_except=tracking.but):
            cursor.execute(statement)

    def _apply_current(self, cursor: Any, stage: Target, columns: list[str],
                       present: list[str], keys: list[str], manifest: dict[str, Any]) -> None:
        for statement in self.dialect.apply_current(
                self.target, stage, columns, present, keys, int(manifest.get("deleted", 0)),
                int(manifest.get("updated", 0)), int(manifest.get("inserted", 0))):
            cursor.execute(statement.query)
            if statement.rows is not None and cursor.rowcount != statement.rows:
                raise self.checks.mismatch(
                    f"the version's {statement.what} rows matched {cursor.rowcount} rows of the "
                    f"table, not {statement.rows} (rows changed by another writer)")

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        if not applies(manifest):
            return True
        with self._session("reading the bookkeeping table") as conn, conn.cursor() as cursor:
            done = bookkeeping.applied_version(self.dialect, cursor, self.target, version)
        return done is not None and done.incarnation == manifest.get("incarnation")

    # -- verify -------------------------------------------------------------------------
    def replay(self, spark: SparkSession) -> Replayed:
        """The table's rows (a history: its live open rows, without the history's columns)."""
        with self._session("reading the table back") as conn:
            return self.dialect.read_table(conn, self.target, list(self.table.keys),
                                           self.layout if self.history else None,
                                           self._compared)

    def comparable(self, snapshot: DataFrame) -> DataFrame:
        """The snapshot as it is; its schema tells :meth:`replay` how the columns the server
        holds as JSON compare (verify asks for it first)."""
        self._compared = snapshot.schema
        return snapshot
