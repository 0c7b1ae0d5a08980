"""A database table or query read over JDBC: each run reads one snapshot, once.

Order of one read (PostgreSQL):

1. the read's start time (UTC) is taken: the default snapshot id, ``20261123T073500.123456Z``;
2. a connection held by the Spark driver opens a REPEATABLE READ, READ ONLY transaction and
   exports its snapshot (``pg_export_snapshot()``); the snapshot id query and the min/max of
   the partition column run inside it;
3. every partition's session (Spark's ``sessionInitStatement``) imports it with ``SET
   TRANSACTION SNAPSHOT '<id>'`` inside a REPEATABLE READ transaction that stays open for the
   partition's query whether or not Spark turned autocommit off (:func:`session_init`);
4. before any row is read, the columns' types decide how each is read so that no value
   changes, or refuse the table (:mod:`diffcdc.sources.jdbc_types`);
5. the rows are written once to a Parquet copy under the table's state; the transaction ends.

Every connection of the read has PostgreSQL's ``lock_timeout`` and ``statement_timeout`` set
(the source's settings): a read blocked behind DDL fails in one line and releases its locks
instead of waiting for ever (a DROP TABLE queued behind the held snapshot would otherwise
block every partition's query while it waits for the read).

Other databases read with one partition (a config asking for more is refused): one query sees
one consistent state in any database with statement-level read consistency.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

from pyspark.sql import SparkSession

from diffcdc.errors import ConfigError, DiffcdcError
from diffcdc.sources.base import PendingSnapshot, Snapshot, Source, check_order
from diffcdc.sources.config import JdbcSourceConfig
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.jdbc_mysql import plan_mysql, session_statement
from diffcdc.sources.jdbc_pg_client import PostgresClientSession
from diffcdc.sources.jdbc_session import JdbcSession, connection_properties, jdbc_error
from diffcdc.sources.jdbc_types import ReadPlan, plan_read
from diffcdc.spark.paths import spark_path
from diffcdc.spark.session import is_connect

_IN_SNAPSHOT_CHECK = (
    "DO $diffcdc$ BEGIN IF current_setting('transaction_isolation') <> 'repeatable read' THEN "
    "RAISE EXCEPTION 'diffcdc: partition session is outside the exported snapshot transaction'; "
    "END IF; END $diffcdc$"
)


def session_init(snapshot: str) -> str:
    """The statements that put a partition's session into the exported snapshot.

    With autocommit off (what Spark's PostgreSQL dialect does when a fetch size is set) the
    driver has already begun the transaction: ``BEGIN`` only warns and ``SET TRANSACTION``
    sets its mode. With autocommit on, the statements of one execute form an implicit block
    that would end before the data query; the explicit ``BEGIN`` turns it into a transaction
    that stays open for the query. Either way the query reads the exported snapshot.
    """
    return (
        "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
        f"SET TRANSACTION SNAPSHOT '{snapshot}'; {_IN_SNAPSHOT_CHECK}"
    )


def snapshot_id_now(now: dt.datetime | None = None) -> str:
    """The read's start time in UTC, ordered lexically: ``20261123T073500.123456Z``."""
    return (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%S.%fZ")


class JdbcSource(Source):
    """One configured JDBC source (see the module docstring)."""

    materialized = True

    def __init__(self, cfg: JdbcSourceConfig, table: str) -> None:
        self.cfg = cfg
        self.table = table

    def describe(self) -> str:
        return self.cfg.describe()

    def pending(self, committed: Sequence[str]) -> list[PendingSnapshot]:
        return [PendingSnapshot(None, self.describe())]  # the database always has a state to read

    def read(
        self, spark: SparkSession, pending: PendingSnapshot, copies: SnapshotCopies,
        after: str | None,
    ) -> Snapshot | None:
        password = self.cfg.password(self.table)
        started = dt.datetime.now(dt.timezone.utc)  # the snapshot's as-of time
        try:
            session = open_session(spark, self.cfg, password)
        except DiffcdcError:
            raise
        except Exception as exc:
            raise jdbc_error(exc, self.cfg, password) from None
        try:
            try:
                snapshot = session.export_snapshot() if session.postgres else None
                sid = self._snapshot_id(session) or snapshot_id_now(started)
                if not check_order(sid, after, self.table, self.describe()):
                    return None
                plan = self._plan(session)
                options = self._options(session, password, snapshot, plan)
            except DiffcdcError:
                raise
            except Exception as exc:
                raise jdbc_error(exc, self.cfg, password) from None
            copy = copies.path(sid)  # refuses an id unusable as a folder name before reading
            try:
                reader = spark.read.format("jdbc")
                for key, value in options.items():
                    reader = reader.option(key, value)
                rows = reader.load()
                if plan.spark_select is not None:  # values read as text, turned and checked
                    rows = rows.selectExpr(*plan.spark_select)
                copy = copies.write(rows, sid)
            except Exception as exc:
                raise jdbc_error(exc, self.cfg, password) from None
        finally:
            session.close()
        return Snapshot(sid, self.describe(), spark.read.parquet(spark_path(spark, copy)),
                        time=started)

    def _plan(self, session: Session) -> ReadPlan:
        """How each column is read (from the relation's metadata: no row read yet)."""
        columns = session.columns(self._relation())
        if session.mysql:
            return plan_mysql(columns, self._relation(), self.cfg.wide_numeric,
                              self.cfg.column_types, self.table)
        return plan_read(
            columns, relation=self._relation(), postgres=session.postgres,
            wide_numeric=self.cfg.wide_numeric, column_types=self.cfg.column_types,
            table=self.table, enums=session.enum_arrays() if session.postgres else frozenset(),
            partition_column=self.cfg.partition_column if self.cfg.num_partitions > 1 else None,
            is_query=self.cfg.query is not None,
            jvm_zone=session.jvm_zone() if session.postgres else "UTC",
        )

    def _snapshot_id(self, session: Session) -> str | None:
        if self.cfg.snapshot_id_query is None:
            return None
        (value,), _ = session.values(self.cfg.snapshot_id_query)
        if value is None:
            raise ConfigError(
                "snapshot_id_query returned no value (no row, or NULL)",
                table=self.table,
                path=self.describe(),
                hint="make the query return one non-NULL value, e.g. the current batch number",
            )
        return str(value)

    def _relation(self) -> str:
        return self.cfg.table if self.cfg.table else f"({self.cfg.query}) diffcdc_source"

    def _options(
        self, session: Session, password: str | None, snapshot: str | None, plan: ReadPlan
    ) -> dict[str, str]:
        cfg = self.cfg
        options = {"url": cfg.url, "dbtable": plan.relation, "fetchsize": str(cfg.fetch_size),
                   **connection_properties(cfg)}
        if plan.custom_schema:
            options["customSchema"] = plan.custom_schema
        if not session.postgres and cfg.statement_timeout:  # PostgreSQL: statement_timeout
            options["queryTimeout"] = str(max(1, int(cfg.statement_timeout)))
        if cfg.driver_class:
            options["driver"] = cfg.driver_class
        if cfg.user is not None:
            options["user"] = cfg.user
        if password is not None:
            options["password"] = password
        if snapshot is not None:
            options["sessionInitStatement"] = session_init(snapshot)
        if session.mysql:
            options["sessionInitStatement"] = session_statement(cfg.lock_timeout)
        if cfg.partition_column and cfg.num_partitions > 1:
            bounds = self._bounds(session)
            if bounds is not None:
                options.update({
                    "partitionColumn": cfg.partition_column,
                    "lowerBound": bounds[0],
                    "upperBound": bounds[1],
                    "numPartitions": str(cfg.num_partitions),
                })
        return options

    def _bounds(self, session: Session) -> tuple[str, str] | None:
        """The split range: as configured, else min/max of the column (None: no rows)."""
        cfg = self.cfg
        low, high = cfg.lower_bound, cfg.upper_bound
        if low is None or high is None:
            column = cfg.partition_column
            sql = f"SELECT min({column}), max({column}) FROM {self._relation()}"
            (found_low, found_high), _ = session.values(sql)
            if session.postgres and _special(found_low, found_high):
                # infinity / NaN split nothing (the last and first partitions are open-ended;
                # the read refuses such a value in one line): the range of the other values
                (found_low, found_high), _ = session.values(
                    f"{sql} WHERE {column}::text NOT IN ({_SPECIAL})"
                )
            if found_low is None or found_high is None:
                return None
            low = _floor(found_low) if low is None else low
            high = _ceil(found_high) if high is None else high
        if str(low) == str(high):
            return None  # one value: nothing to split
        return str(low), str(high)


Session = JdbcSession | PostgresClientSession


def open_session(spark: SparkSession, cfg: JdbcSourceConfig, password: str | None) -> Session:
    """The read's own connection: through the JVM's JDBC driver in a classic session; held by
    this process (psycopg) for PostgreSQL over Spark Connect, which has no JVM gateway."""
    if not is_connect(spark):
        return JdbcSession(spark, cfg, password)
    if cfg.subprotocol == "postgresql":
        return PostgresClientSession(spark, cfg, password)
    raise ConfigError(
        f"a {cfg.subprotocol} JDBC source cannot be read over Spark Connect yet: its read is "
        "planned through the JDBC driver in the Spark driver's JVM, which a Connect client has "
        "no access to",
        path=cfg.describe(),
        hint="run this table with classic Spark (--master, or without --remote / SPARK_REMOTE), "
        "or read it into a DataFrame yourself and use diffcdc.run_dataframe",
    )


#: PostgreSQL's values past every number, date and time (text), which Spark cannot split at.
_SPECIAL = "'infinity', '-infinity', 'NaN', 'Infinity', '-Infinity'"


def _special(*values: object) -> bool:
    return any(str(v).lower().lstrip("-") in ("infinity", "nan") for v in values if v is not None)


def _floor(value: str) -> str:
    """Spark wants whole-number bounds for a numeric column (dates and times pass as text)."""
    return _integral(value, ROUND_FLOOR)


def _ceil(value: str) -> str:
    return _integral(value, ROUND_CEILING)


def _integral(value: str, rounding: str) -> str:
    try:
        return str(Decimal(value).to_integral_value(rounding))
    except InvalidOperation:
        return value
