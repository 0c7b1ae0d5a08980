"""A JDBC connection held by the Spark driver's JVM, and JDBC failures as one-line errors.

The connection goes through the same driver jar Spark reads with (no Python database client
is needed). For PostgreSQL it holds the REPEATABLE READ transaction whose snapshot every
partition's session imports (``pg_export_snapshot()``), as a parallel ``pg_dump`` does: the
exported snapshot stays importable only while this transaction is open.
"""

from __future__ import annotations

import re
from typing import Any

from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession

from diffcdc.errors import DiffcdcError, InputRefused, SourceError, SourceUnavailable
from diffcdc.sources.config import JdbcSourceConfig
from diffcdc.sources.jdbc_mysql import session_statement
from diffcdc.sources.jdbc_types import Column, refusal_in
from diffcdc.spark.compat import error_text

_REPEATABLE_READ = 4  # java.sql.Connection.TRANSACTION_REPEATABLE_READ


class JdbcSession:
    """One open connection (see the module docstring); close it when the read is done."""

    def __init__(self, spark: SparkSession, cfg: JdbcSourceConfig, password: str | None) -> None:
        jvm = spark._jvm  # type: ignore[attr-defined]
        assert jvm is not None
        self.jvm = jvm
        name = cfg.driver_class
        if name is None:
            raise SourceError(
                f"no JDBC driver class known for {cfg.subprotocol}",
                path=cfg.describe(),
                hint="set `driver` (and `driver_jar`) in the table's source",
            )
        driver_class: Any = jvm
        for part in name.split("."):
            driver_class = getattr(driver_class, part)
        if not isinstance(driver_class, JavaClass):
            raise SourceError(
                f"JDBC driver {name} is not on Spark's classpath",
                path=cfg.describe(),
                hint="install it (Debian: libpostgresql-jdbc-java) or set `driver_jar`; a running "
                "Spark session cannot load jars, so start it with spark.jars set to the jar",
            )
        props = jvm.java.util.Properties()
        for key, value in connection_properties(cfg).items():
            props.setProperty(key, value)
        if cfg.user is not None:
            props.setProperty("user", cfg.user)
        if password is not None:
            props.setProperty("password", password)
        self.conn = driver_class().connect(cfg.url, props)
        if self.conn is None:
            raise SourceError(f"JDBC driver {name} does not accept this URL", path=cfg.describe())
        self.postgres = cfg.subprotocol == "postgresql"
        self.mysql = cfg.subprotocol == "mysql"
        if self.mysql:
            stmt = self.conn.createStatement()
            try:
                stmt.execute(session_statement(cfg.lock_timeout))
            finally:
                stmt.close()
        if self.postgres:
            self.conn.setAutoCommit(False)
            self.conn.setTransactionIsolation(_REPEATABLE_READ)
            self.conn.setReadOnly(True)

    def values(self, sql: str) -> tuple[list[Any], list[int]]:
        """The first row of ``sql`` (as strings / numbers) and the JDBC types of its columns."""
        stmt = self.conn.createStatement()
        try:
            rs = stmt.executeQuery(sql)
            meta = rs.getMetaData()
            count = meta.getColumnCount()
            types = [meta.getColumnType(i + 1) for i in range(count)]
            if not rs.next():
                return [None] * count, types
            return [_value(rs, i + 1, types[i]) for i in range(count)], types
        finally:
            stmt.close()

    def jvm_zone(self) -> str:
        """``UTC`` when the JVM's default time zone has UTC's rules, else that zone's id."""
        zone = self.jvm.java.util.TimeZone.getDefault()
        utc = self.jvm.java.util.TimeZone.getTimeZone("UTC")
        return "UTC" if zone.hasSameRules(utc) else str(zone.getID())

    def columns(self, relation: str) -> list[Column]:
        """The relation's columns as the driver describes them (no row is read)."""
        stmt = self.conn.createStatement()
        try:
            meta = stmt.executeQuery(f"SELECT * FROM {relation} WHERE 1=0").getMetaData()
            return [
                Column(str(meta.getColumnLabel(i)), int(meta.getColumnType(i)),
                       str(meta.getColumnTypeName(i)), int(meta.getPrecision(i)),
                       int(meta.getScale(i)))
                for i in range(1, meta.getColumnCount() + 1)
            ]
        finally:
            stmt.close()

    def enum_arrays(self) -> frozenset[str]:
        """PostgreSQL: the names of the enum types' arrays (``_mood``); Spark reads them exactly."""
        stmt = self.conn.createStatement()
        try:
            rs = stmt.executeQuery("SELECT typname FROM pg_type WHERE typtype = 'e'")
            names = set()
            while rs.next():
                names.add("_" + str(rs.getString(1)))
            return frozenset(names)
        finally:
            stmt.close()

    def export_snapshot(self) -> str:
        """Export this transaction's snapshot (PostgreSQL); its id for ``SET TRANSACTION SNAPSHOT``."""
        (snapshot,), _ = self.values("SELECT pg_export_snapshot()")
        return str(snapshot)

    def close(self) -> None:
        try:
            if self.postgres and not self.conn.isClosed():
                self.conn.rollback()  # read only: nothing to keep
            self.conn.close()
        except Exception:  # noqa: BLE001 - the read is over; a dead connection is fine here
            pass


def connection_properties(cfg: JdbcSourceConfig) -> dict[str, str]:
    """Driver properties of every connection of a read: PostgreSQL's lock and statement
    time-outs (``options=-c ...``, so also Spark's own schema query has them)."""
    if cfg.subprotocol == "mysql":  # TINYINT(1) is a number, not a boolean (2 stays 2)
        return {"tinyInt1isBit": "false"}
    if cfg.subprotocol != "postgresql":
        return {}
    lock, statement = (int(round(s * 1000)) for s in (cfg.lock_timeout, cfg.statement_timeout))
    return {"options": f"-c lock_timeout={lock} -c statement_timeout={statement}"}


#: java.sql.Types codes read as exact numbers.
_NUMERIC = {-6, 5, 4, -5, 2, 3, 7, 6, 8}


def _value(rs: Any, index: int, jdbc_type: int) -> Any:
    if jdbc_type in _NUMERIC:
        value = rs.getBigDecimal(index)  # py4j hands a java.math.BigDecimal over as a Decimal
        return None if value is None else format(value, "f")
    return rs.getString(index)


def jdbc_error(exc: BaseException, cfg: JdbcSourceConfig, password: str | None) -> DiffcdcError:
    """A one-line error for a failed database read; the password never appears in it."""
    sql_state, text = _sql_cause(exc)
    if password:
        text = text.replace(password, "***")
    where = cfg.describe()
    refused = refusal_in(text)
    if refused is not None:
        named = re.match(r"column (.+?) \(", refused)
        column = named.group(1) if named else "COLUMN"
        return InputRefused(
            f"{refused}; nothing was committed", path=where,
            hint=f'read the column as text with column_types = {{ {column} = "string" }} in the '
            "table's source, or as a decimal that holds it (docs/sources.md)",
        )
    if sql_state == "55P03" or "Lock wait timeout exceeded" in text:  # PostgreSQL, MariaDB/MySQL
        return SourceUnavailable(
            f"a lock on the source was not granted within lock_timeout = {cfg.lock_timeout:g} s "
            "(another session holds or waits for a conflicting lock, e.g. a DROP or ALTER TABLE); "
            "the read gave up and released its own locks",
            path=where,
            hint="run again once that statement is done, or raise lock_timeout in the table's source",
        )
    if sql_state == "57014" and "statement timeout" in text:
        return SourceError(
            f"a query of the read ran longer than statement_timeout = {cfg.statement_timeout:g} s",
            path=where,
            hint="raise statement_timeout in the table's source (0 = no limit), or read with more "
            "partitions",
        )
    if sql_state.startswith("28"):
        return SourceError(
            f"database refused the login: {text}", path=where,
            hint="check `user` and the password in the environment variable named by password_env",
        )
    if sql_state.startswith(("08", "57P")) or "Connection refused" in text or "I/O error" in text:
        return SourceUnavailable(
            f"database connection failed: {text}", path=where,
            hint="check that the database is up and reachable, then run again",
        )
    if sql_state.startswith("42"):
        return SourceError(
            f"database refused the query: {text}", path=where,
            hint="check `table` / `query` / `partition_column` and the user's privileges",
        )
    if sql_state == "22003" or any(m in text for m in _OUT_OF_RANGE):
        return InputRefused(
            f"a value is out of range of the type it is read as: {text}; nothing was committed",
            path=where,
            hint='read the column as text with column_types = { COLUMN = "string" } in the '
            "table's source, or as a decimal wide enough for it (docs/sources.md)",
        )
    # No --debug hint: the Java trace is not chained (it may carry connection options).
    if not sql_state:  # not the database's error: Spark's, or the driver's
        return SourceError(f"database read failed: {text}", path=where,
                           hint="check the table's source settings (url, table or query, "
                           "partition_column); Spark's side of the error is in the run's "
                           ".spark.log file under the state root's _logs")
    return SourceError(f"database read failed (SQL state {sql_state}): {text}", path=where,
                       hint="check the database's log for this session")


#: How Spark and the databases say that a value does not fit its type.
_OUT_OF_RANGE = ("NUMERIC_VALUE_OUT_OF_RANGE", "DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION",
                 "numeric field overflow")


def _sql_cause(exc: BaseException) -> tuple[str, str]:
    """The SQL state and first message line of the innermost java.sql.SQLException, if any
    (of a psycopg error: its own; PostgreSQL over Spark Connect)."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        return state, _first_line(str(exc))
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    found: tuple[str, str] | None = None
    seen = 0
    while throwable is not None and seen < 20:
        seen += 1
        try:
            is_sql = throwable.getClass().getName().endswith("SQLException")
            if is_sql:
                found = (str(throwable.getSQLState() or ""), _first_line(str(throwable.getMessage())))
            throwable = throwable.getCause()
        except Exception:  # noqa: BLE001 - the JVM may be gone; fall back to the Python text
            break
    if found is not None:
        return found
    return "", _first_line(error_text(exc))  # a failed job's root cause, on PySpark 3.5 too


def _first_line(text: str) -> str:
    text = text.strip()
    line = text.splitlines()[0] if text else "unknown error"
    return line if refusal_in(line) else line[:300]
