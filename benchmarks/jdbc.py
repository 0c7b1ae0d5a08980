"""First load of a PostgreSQL table through the JDBC source, 1/2/4 partitions, beside a plain read.

Starts its own PostgreSQL cluster (Debian's ``postgresql``, as the tests do), fills a table of
``--rows`` rows with the generator's ten column types, then times per partition count:

* ``diffcdc``: ``run_table`` of a first load (exported snapshot, read once into the Parquet
  copy, fingerprint, state, landing zone) — the whole run;
* ``plain``: ``spark.read.jdbc`` of the same table with the same partitions, written to
  Parquet (what a hand-made export would do before diffcdc could even start).

    python -m benchmarks.jdbc --rows 5000000 [--partitions 1,2,4] [--out benchmarks/results/jdbc-5m.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Any

from .report import print_and_save

FILL = """
DROP TABLE IF EXISTS orders;
CREATE TABLE orders (
  id bigint PRIMARY KEY, customer_id bigint, quantity int, name text, city text,
  amount numeric(18,2), score double precision, order_date date, updated_at timestamptz,
  active boolean
);
INSERT INTO orders
SELECT g, g % 100000, (g % 50)::int,
       CASE WHEN g % 20 = 0 THEN NULL ELSE 'name ' || g END,
       CASE WHEN g % 10 = 0 THEN NULL ELSE 'city ' || (g % 997) END,
       (g % 100000) / 100.0, CASE WHEN g % 50 = 0 THEN NULL ELSE g * 0.001 END,
       DATE '2020-01-01' + (g % 2000)::int, TIMESTAMPTZ '2026-01-01 00:00:00+00' + g * INTERVAL '1 second',
       CASE WHEN g % 33 = 0 THEN NULL ELSE g % 2 = 0 END
FROM generate_series(1, {rows}) g;
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partitions", default="1,2,4")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from diffcdc.sources.config import DEFAULT_JARS
    from diffcdc.spark.session import build_spark
    from tests.support.postgres_server import PostgresServer

    server = PostgresServer()
    server.start()
    try:
        started = time.monotonic()
        fill(server, args.rows)
        fill_seconds = round(time.monotonic() - started, 1)
        spark = build_spark(jars=[DEFAULT_JARS["postgresql"]])  # local[*], 2 GiB driver
        here = os.path.dirname(os.path.abspath(__file__))
        partitions = [int(p) for p in args.partitions.split(",")]
        result = measure(spark, server.jdbc_url, server.user, server.password,
                         os.path.join(here, "work", "jdbc"), partitions)
    finally:
        server.remove()
    result.update(rows=args.rows, fill_seconds=fill_seconds, cores=os.cpu_count(),
                  command=f"python -m benchmarks.jdbc --rows {args.rows} --partitions {args.partitions}")
    print_and_save(result, args.out)


def fill(server: Any, rows: int) -> None:
    """The ``orders`` table with ``rows`` rows (ten columns, NULLs in five)."""
    server.sql(FILL.format(rows=int(rows)))
    server.sql("VACUUM ANALYZE orders")  # not inside the fill's transaction


def measure(spark: Any, url: str, user: str, password: str, work: str,
            partitions: list[int]) -> dict[str, Any]:
    """Timed first loads and plain reads of ``orders`` per partition count (rows/s)."""
    from diffcdc.config import TableConfig
    from diffcdc.core.quality_config import QualityConfig
    from diffcdc.engine.run import RunOptions, run_table

    os.environ["DIFFCDC_BENCH_PG_PASSWORD"] = password
    quality = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None)
    out: dict[str, Any] = {"diffcdc": {}, "plain": {}}
    warm = TableConfig(name="warm", keys=["id"], landing=os.path.join(work, "warm", "landing"),
                       source={"type": "jdbc", "url": url, "user": user, "query":
                               "SELECT * FROM orders WHERE id <= 1000",
                               "password_env": "DIFFCDC_BENCH_PG_PASSWORD"})
    run_table(spark, warm, os.path.join(work, "warm", "state"), RunOptions(quality=quality))  # JVM/JIT warm-up
    for n in partitions:
        shutil.rmtree(work, ignore_errors=True)
        source: dict[str, Any] = {"type": "jdbc", "url": url, "table": "orders", "user": user,
                                  "password_env": "DIFFCDC_BENCH_PG_PASSWORD"}
        if n > 1:
            source.update(partition_column="id", num_partitions=n)
        table = TableConfig(name="orders", source=source, keys=["id"],
                            landing=os.path.join(work, "landing"))
        started = time.monotonic()
        report = run_table(spark, table, os.path.join(work, "state"), RunOptions(quality=quality))
        seconds = time.monotonic() - started
        (snap,) = report.snapshots
        out["diffcdc"][str(n)] = _rate(snap.rows, seconds)

        shutil.rmtree(work, ignore_errors=True)
        options = {"url": url, "dbtable": "orders", "user": user, "password": password,
                   "driver": "org.postgresql.Driver", "fetchsize": "10000"}
        if n > 1:
            (low, high), = spark.read.format("jdbc").options(
                **{**options, "dbtable": "(SELECT min(id), max(id) FROM orders) b"}).load().collect()
            options.update(partitionColumn="id", lowerBound=str(low), upperBound=str(high),
                           numPartitions=str(n))
        started = time.monotonic()
        spark.read.format("jdbc").options(**options).load().write.parquet(os.path.join(work, "plain"))
        seconds = time.monotonic() - started
        rows = spark.read.parquet(os.path.join(work, "plain")).count()
        out["plain"][str(n)] = _rate(rows, seconds)
    shutil.rmtree(work, ignore_errors=True)
    return out


def _rate(rows: int, seconds: float) -> dict[str, Any]:
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


if __name__ == "__main__":
    main()
