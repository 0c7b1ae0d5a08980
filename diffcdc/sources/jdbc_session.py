"""A JDBC connection held by the Spark driver's JVM, and JDBC failures as one-line errors.

The connection goes through the same driver jar Spark reads with (no Python database client
is needed). For PostgreSQL it holds the REPEATABLE READ transaction whose snapshot every
partition's session imports (``pg_export_snapshot()``), as a parallel ``pg_dump`` does: the
exported snapshot stays importable only while this transaction is open.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession

from diffcdc.errors import DiffcdcError, SourceError, SourceUnavailable
from diffcdc.sources.config import JdbcSourceConfig

_REPEATABLE_READ = 4  # java.sql.Connection.TRANSACTION_REPEATABLE_READ


class JdbcSession:
    """One open connection (see the module docstring); close it when the read is done."""

    def __init__(self, spark: SparkSession, cfg: JdbcSourceConfig, password: str | None) -> None:
        jvm = spark._jvm  # type: ignore[attr-defined]
        assert jvm is not None
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
        if cfg.user is not None:
            props.setProperty("user", cfg.user)
        if password is not None:
            props.setProperty("password", password)
        self.conn = driver_class().connect(cfg.url, props)
        if self.conn is None:
            raise SourceError(f"JDBC driver {name} does not accept this URL", path=cfg.describe())
        self.postgres = cfg.subprotocol == "postgresql"
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
    # No --debug hint: the Java trace is not chained (it may carry connection options).
    return SourceError(f"database read failed: {text}", path=where,
                       hint="check the database's log for this session")


def _sql_cause(exc: BaseException) -> tuple[str, str]:
    """The SQL state and first message line of the innermost java.sql.SQLException, if any."""
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
    return "", _first_line(str(exc))


def _first_line(text: str) -> str:
    text = text.strip()
    return (text.splitlines()[0] if text else "unknown error")[:300]
