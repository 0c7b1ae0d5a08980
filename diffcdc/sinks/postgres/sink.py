"""A PostgreSQL table kept equal to the snapshots, one transaction per diffcdc version.

``stage`` writes the change set as Parquet under the version's staging folder (nothing touches
the server). ``publish`` checks the target (:mod:`diffcdc.sinks.postgres.target_check`),
bulk-loads the staged rows by COPY into an UNLOGGED staging table (named from the target and
the version, dropped afterwards) and then, in ONE transaction, applies them
(:mod:`diffcdc.sinks.postgres.apply_sql`; a history: :mod:`diffcdc.sinks.postgres.history_sql`)
and inserts the version's bookkeeping row (:mod:`diffcdc.sinks.postgres.bookkeeping`), whose
primary key makes a second apply of the version fail inside that transaction. A republish
after a kill anywhere finds the row and does nothing; before the COMMIT nothing of the version
is visible. A full image (a first load, a reload, a re-created table, also of an empty
snapshot) is loaded into a new table with the primary key on the keys, which takes the
target's place in the transaction that records it.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from diffcdc.core.changeset import OP
from diffcdc.core.compare import Replayed
from diffcdc.core.history_layout import HistoryLayout
from diffcdc.errors import ConfigError, DiffcdcError, InputRefused
from diffcdc.faults import crash_point
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.history_settings import Tracking, refuse_tracked_columns
from diffcdc.sinks.postgres import apply_sql, bookkeeping
from diffcdc.sinks.postgres import replay as pg_replay
from diffcdc.sinks.postgres.apply_sql import Target
from diffcdc.sinks.postgres.config import (
    PostgresSinkConfig,
    identifier_problem,
    own_table_problem,
)
from diffcdc.sinks.postgres.connection import PgConnection, connect, database_error
from diffcdc.sinks.postgres.copy import copy_into
from diffcdc.sinks.postgres.target_check import (
    Expected,
    TargetCheck,
    applied_version,
    column_types,
    table_columns,
    table_oid,
)
from diffcdc.sinks.postgres.types import PART_COLUMN, check_identifier, column_defs, pg_type
from diffcdc.sources.snapshot_time import format_time, read_time
from diffcdc.spark.paths import spark_path


def applies(manifest: dict[str, Any]) -> bool:
    """Whether a version writes to the target: it has changes, or it is a full image (also of
    an empty snapshot: the table is emptied)."""
    return bool(manifest.get("rows")) or bool(manifest.get("initial"))


_TYPE_NAMES = {"timestamptz": "timestamp with time zone",
               "timestamp": "timestamp without time zone", "time": "time without time zone"}


def _type_text(cursor: Any, kind: sql.Composable) -> str:
    """A type as :func:`pg_type` makes it, spelled as the server's ``format_type`` shows it."""
    text = kind.as_string(cursor).replace(", ", ",")
    base, brackets = (text[:-2], "[]") if text.endswith("[]") else (text, "")
    return _TYPE_NAMES.get(base, base) + brackets


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


class PostgresSink(Sink):
    """The table ``schema.table`` on the configured server."""

    type = "postgres"

    def __init__(self, sink_id: str, table: SinkTable, config: PostgresSinkConfig) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.history = config.mode == "scd2"
        self.needs_snapshot_time = self.history
        self.layout = config.history_layout() if self.history else HistoryLayout()
        if self.history:
            self.reserved_columns = self.layout.columns
        name = config.table_name(table.name)
        problem = identifier_problem(name) or own_table_problem(name)
        if problem is not None:
            raise ConfigError(f"sink {sink_id}: the PostgreSQL table name {name!r} {problem}",
                              table=table.name,
                              hint="give the sink a shorter `table` name of its own")
        self.target: Target = (config.db_schema, name)
        self.checks = TargetCheck(sink_id, table.name, self.target, config.where(),
                                  self.reload_command())
        self._conn: PgConnection | None = None
        #: The schema of the snapshot verify compares the table with (:meth:`comparable`).
        self._compared: T.StructType | None = None

    # -- the server ---------------------------------------------------------------------
    @property
    def where(self) -> str:
        return f"sink {self.id}"

    def connection(self) -> PgConnection:
        if self._conn is None:
            self._conn = self.config.connection(self.table.name)
        return self._conn

    @contextmanager
    def _session(self, what: str) -> Iterator[Any]:
        """An open connection (closed afterwards); a server failure while doing ``what`` as
        one line."""
        import psycopg

        conn = connect(self.connection(), self.where)
        try:
            yield conn
        except psycopg.Error as exc:
            raise database_error(self.where, what, exc,
                                 "check the server and the sink's settings, then run again "
                                 "(a version is committed once or not at all)") from None
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
        where = f"sink {self.id}, table {self.target[0]}.{self.target[1]}"
        for field in changes.schema.fields:
            check_identifier(field.name, where)
        column_defs(changes.schema, where)  # a type PostgreSQL cannot hold losslessly: refused

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
        """The bookkeeping row and the table's oid; the row count waits for ``check``."""
        with self._session("checking the target table") as conn, conn.cursor() as cursor:
            self.checks.verify(cursor, self._expected(history), count=False)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        if changes.rows:
            frame = changes.frame
            frame.write.mode("error").parquet(
                spark_path(frame.sparkSession, os.path.join(staging_dir, "changes")))
        if changes.initial or history.last is None:
            incarnation = uuid.uuid4().hex[:16]
        else:
            incarnation = history.last[1].get("incarnation")
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
                done = applied_version(cursor, self.target, version)
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
        loaded = copy_into(self._loader(staged), staged, self.connection(), into, columns,
                           self.where)
        if loaded != rows:
            raise DiffcdcError(f"{self.where}: COPY loaded {loaded} rows into "
                               f"{into[0]}.{into[1]}, the version has {rows}",
                               table=self.table.name,
                               hint="run again (nothing of the version was committed)")

    @staticmethod
    def _loader(staged: str) -> SparkSession | None:
        """Where staged rows are COPYed from: small inputs from this process (publishing needs
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
            cursor.execute(apply_sql.drop_if_exists(new))
            # the part column: copy_into's parallel, retry-safe load (dropped after it)
            cursor.execute(apply_sql.create_table(new, sql.SQL(", ").join([
                column_defs(schema, self._where_table),
                sql.SQL("{} integer").format(sql.Identifier(PART_COLUMN))])))
        conn.commit()
        self._copy(staged, new, schema.fieldNames(), int(manifest.get("rows") or 0))
        crash_point("postgres_copied", scope=self.id)
        with conn.cursor() as cursor:
            cursor.execute(apply_sql.drop_column(new, PART_COLUMN))
            cursor.execute(apply_sql.primary_key(new, keys))
            if exists:
                cursor.execute(apply_sql.lock_table(self.target))
            for statement in apply_sql.swap_statements(self.target, new[1], exists):
                cursor.execute(statement)
            self._record(cursor, version, manifest, initial=True,
                         count=int(manifest.get("rows") or 0))
            crash_point("postgres_before_commit", scope=self.id)
        conn.commit()
        crash_point("postgres_committed", scope=self.id)

    @property
    def _where_table(self) -> str:
        return f"sink {self.id}, table {self.target[0]}.{self.target[1]}"

    def _prepare(self, cursor: Any, manifest: dict[str, Any], expected: Expected | None) -> bool:
        """Before a version's load: the schema and bookkeeping table made; a first image
        (``expected`` None) refused onto a table that is not ours, a later version onto a
        table that is not where the sink left it (its row count waits for the transaction).
        Whether the target table exists."""
        cursor.execute(bookkeeping.schema_query(self.target[0]))
        for statement in bookkeeping.create_statements(
                self.target[0], schema_exists=bool(cursor.fetchone()[0])):
            cursor.execute(statement)
        exists = table_oid(cursor, self.target) is not None
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
        history_sql = self._history()
        try:
            cursor.execute(history_sql.history_layout_query(self.target, self.layout.start_at))
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
        oid = table_oid(cursor, self.target)
        assert oid is not None
        if initial:
            cursor.execute(bookkeeping.forget(self.target[0], self.target[1]))
        cursor.execute(bookkeeping.insert(self.target[0], self.target[1], self.table.name,
                                          bookkeeping.Applied(
            version, str(manifest.get("incarnation")), self.id,
            int(manifest.get("inserted", 0)), int(manifest.get("updated", 0)),
            int(manifest.get("deleted", 0)), count, oid)))

    def _load_stage(self, stage: Target, schema: T.StructType, manifest: dict[str, Any],
                    staged: str, conn: Any) -> None:
        """The staging table, created afresh, with the version's change rows."""
        defs = sql.SQL(", ").join([column_defs(schema, self._where_table), sql.SQL(
            "{} integer").format(sql.Identifier(OP)), sql.SQL("{} integer").format(
            sql.Identifier(PART_COLUMN))])
        with conn.cursor() as cursor:
            cursor.execute(apply_sql.drop_if_exists(stage))
            cursor.execute(apply_sql.create_table(stage, defs, unlogged=True))
        conn.commit()
        self._copy(staged, stage, [*schema.fieldNames(), OP], int(manifest.get("rows") or 0))

    def _drop(self, conn: Any, stage: Target) -> None:
        with conn.cursor() as cursor:
            cursor.execute(apply_sql.drop_if_exists(stage))
        conn.commit()

    def _changes(self, conn: Any, version: int, manifest: dict[str, Any], staged: str,
                 expected: Expected | None,
                 earlier: dict[str, list[T.DataType]] | None = None) -> None:
        """One version's change rows (a history: also a full image, as what differs from its
        open rows) applied in one transaction with its bookkeeping row."""
        import psycopg

        schema = self._schema(manifest)
        keys = list(manifest["keys"])
        initial = expected is None
        with conn.cursor() as cursor:  # before the COPY: a target gone costs no load
            exists = self._prepare(cursor, manifest, expected)
        conn.commit()
        stage = self._work_table("stage", version, manifest)
        self._load_stage(stage, schema, manifest, staged, conn)
        crash_point("postgres_copied", scope=self.id)
        columns = schema.fieldNames()
        try:
            with conn.cursor() as cursor:
                if exists:
                    cursor.execute(apply_sql.lock_table(self.target))
                if expected is not None:
                    self.checks.verify(cursor, expected)
                    before = self._row_count(cursor)
                elif not exists:
                    cursor.execute(self._history().history_create(self.target, schema, keys,
                                                                  self.layout))
                oid = table_oid(cursor, self.target)
                assert oid is not None
                present = table_columns(cursor, oid)
                self._refuse_changed_columns(cursor, oid, schema, manifest, earlier or {})
                if self.history:
                    self._refuse_case_renames(present, schema, version)
                added = [(f.name, pg_type(f.dataType, f"{self._where_table}, column {f.name}"))
                         for f in schema.fields if f.name not in present]
                for statement in apply_sql.add_column_statements(self.target, added):
                    cursor.execute(statement)
                self._follow_types(cursor, oid, stage, version)
                if self.history:
                    self._apply_history(cursor, stage, schema, keys, version, manifest, initial,
                                        created=not exists)
                    after = self._row_count(cursor)
                else:
                    self._apply_current(cursor, stage, columns, present, keys, manifest)
                    after = (before + int(manifest.get("inserted", 0))
                             - int(manifest.get("deleted", 0)))
                self._record(cursor, version, manifest, initial=initial, count=after)
                crash_point("postgres_before_commit", scope=self.id)
            conn.commit()
        except psycopg.errors.UniqueViolation as exc:
            conn.rollback()
            raise self.checks.mismatch(
                f"version {version} opens a key the table already holds "
                f"({' '.join(str(exc).split())[:300]})") from None
        crash_point("postgres_committed", scope=self.id)
        self._drop(conn, stage)

    def _refuse_changed_columns(self, cursor: Any, oid: int, schema: T.StructType,
                                manifest: dict[str, Any],
                                earlier: dict[str, list[T.DataType]]) -> None:
        """A column of the snapshots a DBA dropped (ADD COLUMN would bring it back NULL in every
        row the version does not touch) or retyped (a narrower type would cut the values) is
        refused: the table is not where the sink left it."""
        cursor.execute(sql.SQL("SELECT attname, format_type(atttypid, atttypmod) FROM "
                               "pg_attribute WHERE attrelid = {} AND attnum > 0 AND NOT "
                               "attisdropped").format(sql.Literal(oid)))
        found = {str(name): str(kind) for name, kind in cursor.fetchall()}
        away = (" (a history cannot get its past values back: move the history table away, "
                "e.g. ALTER TABLE … RENAME, then reload the sink: a new history starts)"
                if self.history else "")
        for f in schema.fields:
            if f.name not in found:
                if f.name in earlier:
                    raise self.checks.mismatch(
                        f"column {f.name!r} was dropped from the table{away}")
                continue
            allowed = {_type_text(cursor, pg_type(t, f"{self._where_table}, column {f.name}"))
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

    def _follow_types(self, cursor: Any, oid: int, stage: Target, version: int) -> None:
        """A column whose type the version changes (an all-NULL column typed at last, or a
        re-created table's retyped column): the table's column takes the new type when it
        holds only NULLs; else refused (the rows it holds cannot take the new type)."""
        staged = column_types(cursor, table_oid(cursor, stage) or 0)
        held = column_types(cursor, oid)
        for name, kind in staged.items():
            if name in (OP, PART_COLUMN) or name not in held or held[name] == kind:
                continue
            column = sql.Identifier(name)
            cursor.execute(sql.SQL("SELECT count(*) FROM {t} WHERE {c} IS NOT NULL").format(
                t=apply_sql.table_id(self.target), c=column))
            if int(cursor.fetchone()[0]):
                raise self.checks.mismatch(
                    f"version {version} gives column {name!r} the type {kind}, and the table "
                    f"cannot hold it: its column is {held[name]} with values in it"
                    + (" (a history keeps every row it was given: move the history table "
                       "away, e.g. ALTER TABLE … RENAME, then run again: a new history starts "
                       f"with version {version})" if self.history else ""))
            cursor.execute(sql.SQL("ALTER TABLE {t} ALTER COLUMN {c} TYPE {kind} USING NULL")
                           .format(t=apply_sql.table_id(self.target), c=column,
                                   kind=sql.SQL(kind)))

    def _apply_history(self, cursor: Any, stage: Target, schema: T.StructType,
                       keys: list[str], version: int, manifest: dict[str, Any],
                       initial: bool, *, created: bool = False) -> None:
        """``created``: the history was made empty in this transaction (a first load: every
        staged row opens by one INSERT instead of being compared with open rows)."""
        history_sql = self._history()
        at = read_time(str(manifest["valid_from"]))
        # a column of the history the version lacks (removed_columns = "null", a re-created
        # table's): NULL in the staging table, so it is compared and written NULL, as the
        # Delta history merges it
        held = column_types(cursor, table_oid(cursor, self.target) or 0)
        names = schema.fieldNames()
        lacking = [c for c in held if c not in names and c not in self.layout.columns]
        for name in lacking:
            cursor.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN {c} {kind}").format(
                t=apply_sql.table_id(stage), c=sql.Identifier(name), kind=sql.SQL(held[name])))
        names = [*names, *lacking]
        if not initial:
            cursor.execute(history_sql.history_check(self.target, stage, keys, self.layout, at))
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
        for statement in history_sql.history_apply(
                self.target, stage, names, keys, self.layout, version, at,
                initial=initial, compared=compared, target_empty=initial and created,
                track_only=tracking.only, track_except=tracking.but):
            cursor.execute(statement)

    def _row_count(self, cursor: Any) -> int:
        cursor.execute(apply_sql.count_rows(self.target))
        return int(cursor.fetchone()[0])

    def _apply_current(self, cursor: Any, stage: Target, columns: list[str],
                       present: list[str], keys: list[str], manifest: dict[str, Any]) -> None:
        for statement in apply_sql.apply_statements(
                self.target, stage, columns, present, keys, int(manifest.get("deleted", 0)),
                int(manifest.get("updated", 0)), int(manifest.get("inserted", 0))):
            cursor.execute(statement.query)
            if statement.rows is not None and cursor.rowcount != statement.rows:
                raise self.checks.mismatch(
                    f"the version's {statement.what} rows matched {cursor.rowcount} rows of the "
                    f"table, not {statement.rows} (rows changed by another writer)")

    @staticmethod
    def _history() -> Any:
        from diffcdc.sinks.postgres import history_sql

        return history_sql

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        if not applies(manifest):
            return True
        with self._session("reading the bookkeeping table") as conn, conn.cursor() as cursor:
            done = applied_version(cursor, self.target, version)
        return done is not None and done.incarnation == manifest.get("incarnation")

    # -- verify -------------------------------------------------------------------------
    def replay(self, spark: SparkSession) -> Replayed:
        """The table's rows (a history: its live open rows, without the history's columns)."""
        with self._session("reading the table back") as conn:
            return pg_replay.read_table(conn, self.target, list(self.table.keys),
                                        self.layout if self.history else None, self._compared)

    def comparable(self, snapshot: DataFrame) -> DataFrame:
        """The snapshot as it is; its schema tells :meth:`replay` how the columns PostgreSQL
        holds as jsonb compare (verify asks for it first)."""
        self._compared = snapshot.schema
        return snapshot
