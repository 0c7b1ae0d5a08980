"""PostgreSQL over Spark Connect: the read's connection held by this process (psycopg) plans
the same read as the JVM's JDBC driver does in a classic session (issue 29.3).

Each relation of the JDBC source tests (every type they cover, and domains, composites,
varbit, negative scales) is described by both sessions: the same JDBC type codes, names,
precisions and scales, so :mod:`diffcdc.sources.jdbc_types` refuses, converts and reads
alike; the plan's queries (bounds, a snapshot id) give the same values; the exported snapshot
is importable by another session while the holding transaction is open.
"""

from __future__ import annotations

from typing import Any

import pytest

from diffcdc.sources.config import JdbcSourceConfig
from diffcdc.sources.jdbc_pg_client import PostgresClientSession, postgres_conninfo
from diffcdc.sources.jdbc_session import JdbcSession
from tests.support.postgres_tables import KINDS, TYPED, WIDE

pytestmark = [pytest.mark.slow, pytest.mark.integration]

MORE = """
DROP TABLE IF EXISTS more; DROP DOMAIN IF EXISTS positive; DROP TYPE IF EXISTS pair;
CREATE DOMAIN positive AS numeric(8,2) CHECK (VALUE > 0);
CREATE TYPE pair AS (a int, b text);
CREATE TABLE more (id int PRIMARY KEY, p positive, pr pair, vb varbit(9), vbu varbit, n0 numeric(7,0),
  neg numeric(6,-3), vc varchar(12), bc char, t3 time(3), ts0 timestamp(0), tz1 timestamptz(1),
  iv2 interval second(2), s serial, o oid, f4 real, i2 smallint, x xml, pt point, ba bytea[],
  ia numeric(9,4)[], nm name, ch "char");
INSERT INTO more (id, p, pr, vb, vbu, n0, neg, vc, bc, t3, ts0, tz1, iv2, o, f4, i2, x, pt, ba, ia, nm, ch)
VALUES (1, 1.5, ROW(1, 'x'), B'101', B'1', 7, 12000, 'abc', 'z', '01:02:03.456', '2026-01-01 00:00:01',
  '2026-01-01 00:00:01.5+00', '1.25 seconds', 42, 1.5, 2, '<a/>', '(1,2)', ARRAY['\\x00'::bytea],
  ARRAY[1.5], 'n', 'c'),
 (2, 1e5, NULL, NULL, NULL, -7, -5000, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1e30, -2, NULL, NULL,
  NULL, NULL, NULL, NULL);
"""


def _cfg(pg: Any, url: str | None = None) -> JdbcSourceConfig:
    return JdbcSourceConfig(type="jdbc", url=url or pg.jdbc_url, table="t", user=pg.user)


@pytest.fixture(scope="module")
def relations(postgres: Any) -> list[str]:
    for ddl in (TYPED, WIDE, KINDS, MORE):
        postgres.sql(ddl)
    return ["public.typed", "wide", "kinds", "more",
            "(SELECT id, amount * 2 AS twice, tags[1] AS first FROM typed) q"]


def test_the_client_describes_columns_as_the_jdbc_driver_does(spark, postgres, relations):
    classic = JdbcSession(spark, _cfg(postgres), postgres.password)
    client = PostgresClientSession(spark, _cfg(postgres), postgres.password)
    try:
        for relation in relations:
            assert client.columns(relation) == classic.columns(relation), relation
        assert client.enum_arrays() == classic.enum_arrays()
        # the Spark server's JVM zone, asked through Spark SQL instead of the gateway
        assert client.jvm_zone() == classic.jvm_zone() == "UTC"
    finally:
        classic.close()
        client.close()


@pytest.mark.parametrize("sql", [
    "SELECT min(id), max(id) FROM wide",
    "SELECT min(n50), max(n50) FROM wide",
    "SELECT min(amount), max(ratio) FROM typed",
    "SELECT min(ts), max(tstz) FROM typed",
    "SELECT min(day), max(day) FROM typed",
    "SELECT max(f4), min(f4), max(o), max(i2) FROM more",
    "SELECT min(id) FROM wide WHERE id > 100",
    "SELECT 'batch-7'::text, 1e20::float8, 1e-7::numeric",
])
def test_the_plans_queries_give_the_same_values(spark, postgres, relations, sql):
    classic = JdbcSession(spark, _cfg(postgres), postgres.password)
    client = PostgresClientSession(spark, _cfg(postgres), postgres.password)
    try:
        assert client.values(sql) == classic.values(sql)
    finally:
        classic.close()
        client.close()


def test_the_exported_snapshot_is_held_while_the_session_is_open(spark, postgres):
    postgres.sql("DROP TABLE IF EXISTS held; CREATE TABLE held (id int); INSERT INTO held VALUES (1)")
    client = PostgresClientSession(spark, _cfg(postgres), postgres.password)
    try:
        snapshot = client.export_snapshot()
        postgres.sql("INSERT INTO held VALUES (2)")  # committed after the export
        seen = postgres.sql("BEGIN ISOLATION LEVEL REPEATABLE READ; "
                            f"SET TRANSACTION SNAPSHOT '{snapshot}'; SELECT count(*) FROM held; COMMIT")
        assert "1" in seen.split() and "2" not in seen.split(), seen
    finally:
        client.close()
    with pytest.raises(RuntimeError, match="invalid snapshot identifier|does not exist"):
        postgres.sql(f"BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '{snapshot}'")


@pytest.mark.parametrize(("url", "expected"), [
    ("jdbc:postgresql://db:6543/erp", {"host": "db", "port": "6543", "dbname": "erp"}),
    ("jdbc:postgresql://db/erp?ssl=true&ApplicationName=x",
     {"host": "db", "port": "5432", "dbname": "erp", "sslmode": "require", "application_name": "x"}),
    ("jdbc:postgresql://a:1,b:2/erp?targetServerType=primary&currentSchema=s",
     {"host": "a,b", "port": "1,2", "dbname": "erp", "target_session_attrs": "read-write",
      "options": "-c search_path=s"}),
    ("jdbc:postgresql://[::1]:5433/erp", {"host": "::1", "port": "5433", "dbname": "erp"}),
    ("jdbc:postgresql:erp", {"dbname": "erp"}),
])
def test_jdbc_urls_as_libpq_parameters(url, expected):
    assert postgres_conninfo(url) == expected
