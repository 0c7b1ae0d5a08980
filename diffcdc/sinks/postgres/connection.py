"""A connection to the sink's PostgreSQL server: its settings as a record (picklable, so a
Spark task can open its own) and opening one with every wait bounded, its failures in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diffcdc.errors import DiffcdcError, TransientStorageError

if TYPE_CHECKING:
    import psycopg


class PostgresUnavailable(TransientStorageError):
    """The sink's server could not be reached, or refused the login; retrying may succeed."""


@dataclass(frozen=True)
class PgConnection:
    """Where and how to connect (the password resolved from ``password_env``)."""

    host: str
    port: int
    dbname: str
    user: str | None
    password: str | None = field(repr=False)
    #: Seconds to wait for the connection.
    connect_timeout: float = 10
    #: Seconds a statement waits for a lock (``lock_timeout``).
    lock_timeout: float = 30
    #: Seconds one statement may run (``statement_timeout``).
    statement_timeout: float = 3600
    application_name: str = "diffcdc"
    #: libpq's ``ssl*`` parameters from the URL.
    ssl: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        """``psycopg.connect``'s keyword arguments."""
        options = (f"-c lock_timeout={int(self.lock_timeout * 1000)} "
                   f"-c statement_timeout={int(self.statement_timeout * 1000)} "
                   "-c idle_in_transaction_session_timeout=0 -c TimeZone=UTC")
        found: dict[str, Any] = {
            "host": self.host, "port": self.port, "dbname": self.dbname,
            "connect_timeout": max(1, int(round(self.connect_timeout))),
            "application_name": self.application_name, "options": options, **self.ssl,
            # the COPY text is UTF-8: PGCLIENTENCODING or a role's setting would garble it
            "client_encoding": "UTF8"}
        if self.user is not None:
            found["user"] = self.user
        if self.password is not None:
            found["password"] = self.password
        return found

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}/{self.dbname}"


def connect(conn: PgConnection, where: str) -> psycopg.Connection[Any]:
    """An open connection (autocommit off); a server that is down, a refused login or a wait
    longer than ``connect_timeout`` as one line naming ``where`` (e.g. ``sink pg``)."""
    import psycopg

    try:
        return psycopg.connect(**conn.kwargs())
    except psycopg.OperationalError as exc:
        raise PostgresUnavailable(
            f"{where}: cannot connect to PostgreSQL at {conn.where}: {first_line(exc)}",
            hint="check that the server is up and reachable, the user and the password in "
                 "password_env, then run again (nothing was written)") from None


def first_line(exc: BaseException) -> str:
    """The first line of a database error, without libpq's ``connection failed:`` noise."""
    text = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
    return text[:500]


def database_error(where: str, what: str, exc: BaseException, hint: str) -> DiffcdcError:
    """A failure of the server while doing ``what`` as one line (a lock not granted in time
    says so)."""
    import psycopg

    text = first_line(exc)
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return PostgresUnavailable(
            f"{where}: {what}: a lock on the table was not granted within lock_timeout "
            f"({text})",
            hint="another session holds the table (a long query, an open transaction): end it "
                 "or raise lock_timeout, then run again (nothing of this version was committed)")
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return PostgresUnavailable(
            f"{where}: {what}: the statement ran longer than statement_timeout ({text})",
            hint="raise statement_timeout, then run again (nothing of this version was committed)")
    if isinstance(exc, psycopg.OperationalError):
        return PostgresUnavailable(f"{where}: {what}: the connection failed ({text})",
                                   hint="check that the server is up, then run again (a "
                                        "version is committed once or not at all)")
    return DiffcdcError(f"{where}: {what}: {text}", hint=hint)
