"""A PostgreSQL connection held by this Python process, where there is no JVM gateway to hold
one (a Spark Connect session): psycopg, the maintained PostgreSQL driver for Python.

It plays the part of :class:`diffcdc.sources.jdbc_session.JdbcSession` for a read: it holds
the REPEATABLE READ transaction whose snapshot the Spark server's JDBC partitions import
(``pg_export_snapshot()``; importable only while this transaction is open), runs the few
queries of the read's plan (the snapshot id, the partition bounds) and describes the
relation's columns *as the PostgreSQL JDBC driver does* (its ``java.sql.Types`` code, type
name, precision and scale, from ``pgjdbc``'s ``TypeInfoCache``), so that
:mod:`diffcdc.sources.jdbc_types` plans the same read over Spark Connect as in a classic
session. The rows themselves are read by the server's Spark over JDBC, as always.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qsl, unquote

from diffcdc.errors import ConfigError, SourceError
from diffcdc.sources.config import JdbcSourceConfig
from diffcdc.sources.jdbc_session import connection_properties
from diffcdc.sources.jdbc_types import Column

#: java.sql.Types codes.
_BIT, _SMALLINT, _INTEGER, _BIGINT, _REAL, _DOUBLE, _NUMERIC = -7, 5, 4, -5, 7, 8, 2
_CHAR, _VARCHAR, _BINARY, _DATE, _TIME, _TIMESTAMP = 1, 12, -2, 91, 92, 93
_OTHER, _ARRAY, _STRUCT, _DISTINCT, _REF_CURSOR = 1111, 2003, 2002, 2001, 2012

#: pgjdbc's core types (``TypeInfoCache``): name → java.sql.Types code; their arrays ``_name``
#: are ARRAY.
_CORE = {
    "int2": _SMALLINT, "int4": _INTEGER, "oid": _BIGINT, "int8": _BIGINT, "money": _DOUBLE,
    "numeric": _NUMERIC, "float4": _REAL, "float8": _DOUBLE, "char": _CHAR, "bpchar": _CHAR,
    "varchar": _VARCHAR, "text": _VARCHAR, "name": _VARCHAR, "bytea": _BINARY, "bool": _BIT,
    "bit": _BIT, "date": _DATE, "time": _TIME, "timetz": _TIME, "timestamp": _TIMESTAMP,
    "timestamptz": _TIMESTAMP, "refcursor": _REF_CURSOR, "json": _OTHER, "point": _OTHER,
    "xml": 2009,  # SQLXML
}
#: java.sql.Types codes whose values are read as exact numbers (as JdbcSession reads them).
_NUMBERS = {-6, _SMALLINT, _INTEGER, _BIGINT, _NUMERIC, 3, _REAL, 6, _DOUBLE}

_NUMERIC_OID, _BIT_OID, _VARBIT_OID = 1700, 1560, 1562
_MOMENT_OIDS = {1083, 1266, 1114, 1184}  # time, timetz, timestamp, timestamptz
_CHAR_OIDS = {1042, 1043}  # bpchar, varchar
_UNKNOWN_LENGTH = 2147483647  # pgjdbc's default unknownLength
_SERIALS = {"int4": "serial", "int8": "bigserial", "int2": "smallserial"}


def postgres_conninfo(url: str) -> dict[str, str]:
    """libpq connection parameters of a ``jdbc:postgresql:`` URL (host(s), port, database, and
    the URL parameters libpq knows by another name)."""
    rest = url[len("jdbc:postgresql:"):]
    query = ""
    if "?" in rest:
        rest, query = rest.split("?", 1)
    params: dict[str, str] = {}
    if rest.startswith("//"):
        hosts, _, database = rest[2:].partition("/")
        names, ports = [], []
        for host in hosts.split(","):
            found = re.match(r"^(\[[^\]]+\]|[^:]*)(?::(\d+))?$", host)
            if found is None:
                raise ConfigError(f"cannot read the host {host!r} of the JDBC URL",
                                  hint="give the URL as jdbc:postgresql://host:port/database")
            names.append(found.group(1).strip("[]") or "localhost")
            ports.append(found.group(2) or "5432")
        params["host"], params["port"] = ",".join(names), ",".join(ports)
        params["dbname"] = unquote(database)
    else:
        params["dbname"] = unquote(rest)
    renamed = {"ApplicationName": "application_name", "connectTimeout": "connect_timeout",
               "loginTimeout": "connect_timeout", "sslmode": "sslmode", "sslcert": "sslcert",
               "sslkey": "sslkey", "sslrootcert": "sslrootcert", "user": "user",
               "password": "password", "targetServerType": "target_session_attrs"}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in renamed:
            params[renamed[key]] = value
        elif key == "ssl" and value.lower() in ("true", "") and "sslmode" not in params:
            params["sslmode"] = "require"
        elif key == "currentSchema":
            params["options"] = f"-c search_path={value}"
    if params.get("target_session_attrs") in ("master", "primary"):
        params["target_session_attrs"] = "read-write"
    return params


class PostgresClientSession:
    """The read's PostgreSQL connection in this process (see the module docstring)."""

    postgres = True
    mysql = False

    def __init__(self, spark: Any, cfg: JdbcSourceConfig, password: str | None) -> None:
        try:
            import psycopg
        except ImportError:
            raise ConfigError(
                "a PostgreSQL source over Spark Connect needs the psycopg package in this Python "
                "environment (it holds the read's snapshot, as the JVM does in a classic session)",
                path=cfg.describe(),
                hint='pip install "diffcdc[connect]"',
            ) from None
        self._spark = spark
        params = postgres_conninfo(cfg.url)
        options = connection_properties(cfg)["options"]
        params["options"] = f"{params['options']} {options}" if "options" in params else options
        if cfg.user is not None:
            params["user"] = cfg.user
        if password is not None:
            params["password"] = password
        params.setdefault("connect_timeout", "30")
        self.conn = psycopg.connect(**params)  # type: ignore[arg-type]
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        self._types: dict[int, tuple[str, str, bool]] = {}
        self._elements: dict[int, int] = {}

    def values(self, sql: str) -> tuple[list[Any], list[int]]:
        """The first row of ``sql`` (numbers as exact text, others as PostgreSQL's text) and
        the JDBC types of its columns."""
        with self.conn.cursor() as cur:
            cur.execute(sql)  # type: ignore[arg-type] - the config's own query
            result = cur.pgresult
            assert result is not None
            types = [self._jdbc_type(result.ftype(i)) for i in range(result.nfields)]
            if result.ntuples == 0:
                return [None] * result.nfields, types
            out = []
            for i, jdbc_type in enumerate(types):
                raw = result.get_value(0, i)
                text = None if raw is None else bytes(raw).decode("utf-8")
                out.append(_number(text) if jdbc_type in _NUMBERS and text is not None else text)
            return out, types

    def jvm_zone(self) -> str:
        """``UTC`` when the Spark server's JVMs (which read the rows) keep UTC's rules, else
        their zone, as :meth:`JdbcSession.jvm_zone` answers in a classic session."""
        try:
            shown = self._spark.range(1).selectExpr(
                "reflect('java.util.TimeZone', 'getDefault')").first()[0]
        except Exception as exc:  # noqa: BLE001 - a server that forbids reflect()
            return f"unknown ({str(exc).splitlines()[0][:80]})"
        if re.search(r"offset=0,.*useDaylight=false,transitions=0", str(shown)):
            return "UTC"
        found = re.search(r'id="([^"]+)"', str(shown))
        return found.group(1) if found else str(shown)[:80]

    def columns(self, relation: str) -> list[Column]:
        """The relation's columns as the PostgreSQL JDBC driver describes them."""
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {relation} WHERE 1=0")  # type: ignore[arg-type]
            result = cur.pgresult
            assert result is not None
            found = []
            for i in range(result.nfields):
                oid, typmod = result.ftype(i), result.fmod(i)
                name = bytes(result.fname(i) or b"").decode("utf-8")
                base = self._element(oid)
                type_name = self._info(oid)[0]
                if type_name in _SERIALS and self._generated(result.ftable(i), result.ftablecol(i)):
                    type_name = _SERIALS[type_name]  # as pgjdbc names an auto-increment column
                found.append(Column(name, self._jdbc_type(oid), type_name,
                                    _precision(base, typmod), _scale(base, typmod)))
            return found

    def _generated(self, table: int, column: int) -> bool:
        """Whether a table's column is an identity or takes its default from a sequence."""
        if not table or not column:
            return False
        with self.conn.cursor() as cur:
            cur.execute("SELECT a.attidentity <> '' OR coalesce(pg_catalog.pg_get_expr(d.adbin, "
                        "d.adrelid) LIKE '%%nextval(%%', false) FROM pg_catalog.pg_attribute a "
                        "LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND "
                        "d.adnum = a.attnum WHERE a.attrelid = %s AND a.attnum = %s",
                        (table, column))
            row = cur.fetchone()
        return bool(row and row[0])

    def enum_arrays(self) -> frozenset[str]:
        """The names of the enum types' arrays (``_mood``)."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT typname FROM pg_type WHERE typtype = 'e'")
            return frozenset("_" + str(name) for (name,) in cur.fetchall())

    def export_snapshot(self) -> str:
        """Export this transaction's snapshot; its id for ``SET TRANSACTION SNAPSHOT``."""
        (snapshot,), _ = self.values("SELECT pg_export_snapshot()")
        return str(snapshot)

    def close(self) -> None:
        try:
            self.conn.rollback()  # read only: nothing to keep
            self.conn.close()
        except Exception:  # noqa: BLE001 - the read is over; a dead connection is fine here
            pass

    def _info(self, oid: int) -> tuple[str, str, bool]:
        """(type name, typtype, is an array) of a type, asked once per type."""
        if oid not in self._types:
            with self.conn.cursor() as cur:
                cur.execute("SELECT typname, typtype, typinput = 'array_in'::regproc, typelem "
                            "FROM pg_catalog.pg_type WHERE oid = %s", (oid,))
                row = cur.fetchone()
            if row is None:
                raise SourceError(f"PostgreSQL has no type with oid {oid}",
                                  hint="run again; the type may have been dropped meanwhile")
            self._types[oid] = (str(row[0]), str(row[1]), bool(row[2]))
            self._elements[oid] = int(row[3]) if row[2] else oid
        return self._types[oid]

    def _element(self, oid: int) -> int:
        """An array type's element type (pgjdbc sizes an array by its element), else itself."""
        self._info(oid)
        return self._elements[oid]

    def _jdbc_type(self, oid: int) -> int:
        name, typtype, array = self._info(oid)
        if name in _CORE:
            return _CORE[name]
        if array or (name.startswith("_") and name[1:] in _CORE):
            return _ARRAY
        return {"c": _STRUCT, "d": _DISTINCT, "e": _VARCHAR}.get(typtype, _OTHER)


def _number(text: str) -> str:
    """A number's text as an exact decimal (``1e+20`` → ``100000000000000000000``)."""
    try:
        return format(Decimal(text), "f")
    except InvalidOperation:
        return text


def _precision(oid: int, typmod: int) -> int:
    """pgjdbc's ``getPrecision`` (of an array: of its element type)."""
    if oid == _NUMERIC_OID:
        return 0 if typmod == -1 else ((typmod - 4) & 0xFFFF0000) >> 16
    if oid == _BIT_OID:
        return typmod
    if oid == _VARBIT_OID:
        return _UNKNOWN_LENGTH if typmod == -1 else typmod
    if oid in _CHAR_OIDS:
        return _UNKNOWN_LENGTH if typmod == -1 else typmod - 4
    if oid == 1082:  # date
        return 13
    if oid == 1186:  # interval
        return 49
    if oid in _MOMENT_OIDS:  # the length of the text: digits of the seconds, the zone
        seconds = {-1: 7, 0: 0, 1: 3}.get(typmod, typmod + 1)
        return {1083: 8, 1266: 14, 1114: 22, 1184: 28}[oid] + seconds
    return {21: 5, 23: 10, 26: 10, 20: 19, 700: 8, 701: 17, 16: 1, 18: 1}.get(oid, _UNKNOWN_LENGTH)


def _scale(oid: int, typmod: int) -> int:
    """pgjdbc's ``getScale``."""
    if oid == _NUMERIC_OID:
        return 0 if typmod == -1 else (typmod - 4) & 0xFFFF
    if oid in _MOMENT_OIDS:
        return 6 if typmod == -1 else typmod
    if oid == 1186:  # interval
        return 6 if typmod == -1 else typmod & 0xFFFF
    return {700: 8, 701: 17}.get(oid, 0)
