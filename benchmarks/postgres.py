"""The PostgreSQL sink (issue 42 item 5): bulk loading, a first load and a steady version.

Starts its own PostgreSQL cluster (Debian's ``postgresql``, as the tests do) on this machine.

* ``copy``: ``copy_into`` alone (:mod:`diffcdc.sinks.postgres.copy`) on the generator's first
  snapshot of ``--rows`` rows: by one Spark task per file (two cores: two COPYs at once) and
  in this process (the same parts, one after the other), rows per second; the crossover where
  a Spark job starts paying off, at ``--crossover`` row counts; and the two COPY encodings on
  ``--encode-rows`` rows: Arrow's CSV text (what the sink uses) against psycopg's binary COPY
  (``write_row`` with ``set_types``), both read back and compared by the server.
* ``pipeline``: whole ``diffcdc run`` processes (:mod:`benchmarks.processes`): the first load of
  ``--rows`` rows into the ``postgres`` sink (goal: at least 150k rows/s end to end), beside the
  same into a ``delta`` sink; then a steady snapshot (1% updates, 0.5% deletes, 0.5% inserts)
  into each: the PostgreSQL sink's run ÷ the Delta sink's (goal: at most 1.5×), whole process
  and the publish step alone (from the run logs). Each round runs every sink, alternating;
  ``--history`` adds both sinks' history mode (``mode = "scd2"``) the same way.

Every record keeps the load average it ran under (the machine is shared: read ratios).

    python -m benchmarks.postgres copy --rows 5000000 [--crossover 20000,200000,1000000]
    python -m benchmarks.postgres pipeline --rows 5000000 [--rounds 1] [--history]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from typing import Any

from .generate import Rates, generate
from .processes import Runner, check, diffcdc_run, expected_counts, fresh, line, link
from .report import HERE, finish, machine_info

GOAL_FIRST_LOAD_ROWS_PER_S = 150_000
GOAL_STEADY_X_DELTA = 1.5
PASSWORD_ENV = "DIFFCDC_BENCH_PG_PASSWORD"
#: 1% updates, 0.5% deletes, 0.5% inserts (the issue's steady version; no key changes).
STEADY = Rates(updates=0.01, deletes=0.005, inserts=0.005, key_changes=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["copy", "pipeline"])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--crossover", default="20000,200000,1000000",
                        help="row counts of the in-process / Spark tasks comparison")
    parser.add_argument("--encode-rows", type=int, default=500_000)
    parser.add_argument("--data", default=os.path.join(HERE, "data"))
    parser.add_argument("--work", default=os.path.join(HERE, "work"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--timeout", type=float, default=7200.0)
    parser.add_argument("--history", action="store_true",
                        help="pipeline: also both sinks' history mode (mode = \"scd2\")")
    args = parser.parse_args(argv)

    from tests.support.postgres_server import PostgresServer

    server = PostgresServer()
    server.start()
    try:
        if args.command == "copy":
            from diffcdc.spark.session import build_spark

            spark = build_spark()  # diffcdc's defaults: local[*], a 2 GiB driver
            crossover = [int(n) for n in args.crossover.split(",") if n]
            result = measure_copy(spark, server, args.data, args.rows, args.seed, crossover,
                                  args.encode_rows)
        else:
            result = measure_pipeline(Runner(args.timeout), server, args.data, args.work,
                                      args.rows, args.seed, args.rounds, args.history)
    finally:
        server.remove()
    command = (f"python -m benchmarks.postgres {args.command} --rows {args.rows}"
               + (f" --rounds {args.rounds}{' --history' * args.history}"
                  if args.command == "pipeline" else
                  f" --crossover {args.crossover} --encode-rows {args.encode_rows}"))
    result.update(command=command, meta=machine_info())
    out = args.out or os.path.join(HERE, "results", f"postgres-{args.command}-{args.rows}-"
                                   f"{result['meta']['git_commit']}.json")
    return finish(result, out)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _connection(server: Any) -> Any:
    from diffcdc.sinks.postgres.connection import PgConnection

    return PgConnection("127.0.0.1", server.port, server.database, server.user,
                        server.password, statement_timeout=7200)


def _rate(rows: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"rows": rows, "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds) if seconds else None,
            "load_average_1m": _load(), **extra}


def _table(server: Any, name: str, schema: Any, parted: bool = True) -> None:
    from psycopg import sql

    from diffcdc.sinks.postgres.connection import connect
    from diffcdc.sinks.postgres.types import PART_COLUMN, column_defs

    part = sql.SQL(", {} integer").format(sql.Identifier(PART_COLUMN)) if parted else sql.SQL("")
    with connect(_connection(server), "benchmark") as c:
        c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier("public", name)))
        c.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({}{})").format(
            sql.Identifier("public", name), column_defs(schema, name), part))


def _timed_copy(spark: Any, server: Any, folder: str, name: str, in_process: bool
                ) -> dict[str, Any]:
    """One ``copy_into`` of ``folder`` into a fresh table: in this process, or one Spark task
    per file."""
    from diffcdc import staged_files
    from diffcdc.sinks.postgres.copy import copy_into

    frame = spark.read.parquet(folder)
    _table(server, name, frame.schema)
    kept = staged_files.in_process
    staged_files.in_process = lambda _spark, _size: in_process  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        rows = copy_into(spark, folder, _connection(server), ("public", name),
                         frame.schema.fieldNames(), "benchmark")
        seconds = time.perf_counter() - started
    finally:
        staged_files.in_process = kept  # type: ignore[assignment]
    files = len([f for f in os.listdir(folder) if f.endswith(".parquet")])
    server.sql(f"DROP TABLE public.{name}")
    return _rate(rows, seconds, files=files)


def measure_copy(spark: Any, server: Any, data: str, rows: int, seed: int,
                 crossover: list[int], encode_rows: int) -> dict[str, Any]:
    """copy_into's rows/s at ``rows`` (tasks and in process), the crossover sizes, and the
    CSV text against the binary COPY encoding."""
    out: dict[str, Any] = {"rows": rows}
    warm = os.path.join(data, f"postgres-n2000-s{seed}")
    generate(warm, 2000, seed, rates=STEADY)
    _timed_copy(spark, server, os.path.join(warm, "snap-001"), "bench_warm", False)  # workers
    big = os.path.join(data, f"postgres-n{rows}-s{seed}")
    generate(big, rows, seed, rates=STEADY)
    snap = os.path.join(big, "snap-001")
    out["copy_into"] = {"spark_tasks": _timed_copy(spark, server, snap, "bench_tasks", False),
                        "in_process": _timed_copy(spark, server, snap, "bench_here", True)}
    out["copy_into"]["tasks_vs_in_process"] = round(
        out["copy_into"]["in_process"]["seconds"] / out["copy_into"]["spark_tasks"]["seconds"], 3)
    out["crossover"] = {}
    for n in crossover:
        folder = os.path.join(data, f"postgres-n{n}-s{seed}")
        generate(folder, n, seed, rates=STEADY)
        snap_n = os.path.join(folder, "snap-001")
        out["crossover"][str(n)] = {
            "spark_tasks": _timed_copy(spark, server, snap_n, "bench_tasks", False),
            "in_process": _timed_copy(spark, server, snap_n, "bench_here", True)}
    out["encoding"] = measure_encoding(server, snap, encode_rows)
    print(f"  copy_into {rows} rows: tasks {out['copy_into']['spark_tasks']['rows_per_s']} rows/s,"
          f" in process {out['copy_into']['in_process']['rows_per_s']} rows/s", flush=True)
    return out


def _batches(folder: str, rows: int) -> Iterator[Any]:
    from diffcdc.state.check_read import parquet_dataset

    left = rows
    for batch in parquet_dataset(folder).to_batches(batch_size=65536):
        if left <= 0:
            return
        batch = batch.slice(0, left)
        left -= batch.num_rows
        yield batch


def measure_encoding(server: Any, snapshot: str, rows: int) -> dict[str, Any]:
    """The same ``rows`` rows COPYed as Arrow's CSV text and as psycopg's binary COPY
    (``write_row``, the values as Python objects); both tables compared by the server."""
    from psycopg import sql

    from diffcdc.core.arrow_types import spark_schema
    from diffcdc.sinks.postgres.connection import connect
    from diffcdc.sinks.postgres.types import csv_batch
    from diffcdc.state.check_read import parquet_dataset

    arrow = parquet_dataset(snapshot).schema
    schema = spark_schema(arrow)
    names = schema.fieldNames()
    out: dict[str, Any] = {}
    for kind in ("csv_text", "binary_write_row"):
        _table(server, f"enc_{kind}", schema, parted=False)
        target = sql.Identifier("public", f"enc_{kind}")
        fmt = sql.SQL("csv" if kind == "csv_text" else "binary")
        with connect(_connection(server), "benchmark") as c:
            types = [r[0] for r in c.execute(
                "SELECT atttypid::int FROM pg_attribute WHERE attrelid = "
                "%s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (target.as_string(c),)).fetchall()]
            started = time.perf_counter()
            loaded = 0
            with c.cursor().copy(sql.SQL("COPY {} FROM STDIN (FORMAT {})").format(
                    target, fmt)) as copy:
                if kind == "binary_write_row":
                    copy.set_types(types)
                for batch in _batches(snapshot, rows):
                    if kind == "csv_text":
                        copy.write(csv_batch(batch, names, "benchmark"))
                    else:
                        for row in zip(*(batch.column(n).to_pylist() for n in names)):
                            copy.write_row(row)
                    loaded += batch.num_rows
            seconds = time.perf_counter() - started
        out[kind] = _rate(loaded, seconds)
    differ = server.sql("SELECT (SELECT count(*) FROM (SELECT * FROM public.enc_csv_text EXCEPT "
                        "ALL SELECT * FROM public.enc_binary_write_row) a) + (SELECT count(*) "
                        "FROM (SELECT * FROM public.enc_binary_write_row EXCEPT ALL SELECT * "
                        "FROM public.enc_csv_text) b)")
    out["rows_that_differ"] = int(differ)
    out["csv_vs_binary_speed"] = round(out["binary_write_row"]["seconds"]
                                       / out["csv_text"]["seconds"], 3)
    for kind in ("csv_text", "binary_write_row"):
        server.sql(f"DROP TABLE public.enc_{kind}")
    return out


def _config(folder: str, sink: str) -> str:
    lines = ["[diffcdc]", 'state = "state"', 'landing = "landing"', "",
             "[tables.orders]", 'source = "source"', 'keys = ["id"]', sink, ""]
    path = os.path.join(folder, "diffcdc.toml")
    with open(path, "w") as handle:
        handle.write("\n".join(lines))
    return path


def _sinks(server: Any, folder: str, table: str) -> dict[str, str]:
    postgres = (f'type = "postgres", url = "{server.jdbc_url}", user = "{server.user}", '
                f'password_env = "{PASSWORD_ENV}", schema = "public", table = "{table}"')
    delta = f'type = "delta", path = "{os.path.join(folder, "lake")}"'
    return {"postgres": f"sinks = [{{ {postgres} }}]", "delta": f"sinks = [{{ {delta} }}]",
            "postgres-scd2": f'sinks = [{{ {postgres}, mode = "scd2" }}]',
            "delta-scd2": f'sinks = [{{ {delta}, mode = "scd2" }}]'}


def measure_pipeline(runner: Runner, server: Any, data: str, work: str, rows: int, seed: int,
                     rounds: int, history: bool = False) -> dict[str, Any]:
    """Per round, for each sink: a first load of ``rows`` rows, then the steady snapshot, each
    a whole ``diffcdc run``; medians, the first load's rows/s and the steady ratio."""
    os.environ[PASSWORD_ENV] = server.password
    folder = os.path.join(data, f"postgres-n{rows}-s{seed}")
    generate(folder, rows, seed, rates=STEADY)
    sinks = ["postgres", "delta", *(["postgres-scd2", "delta-scd2"] if history else [])]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {"first_load": [], "steady": []} for s in sinks}
    for r in range(rounds):
        for sink in sinks:
            server.sql(f'DROP TABLE IF EXISTS public."orders_{r}_{sink}"')
        for step, index in (("first_load", 1), ("steady", 2)):
            for sink in sinks:
                where = os.path.join(work, "postgres-bench", sink)
                if step == "first_load":
                    fresh(where)
                    _config(where, _sinks(server, where, f"orders_{r}_{sink}")[sink])
                link(os.path.join(folder, f"snap-{index:03d}"), os.path.join(where, "source"),
                     f"snap-{index:03d}")
                record = diffcdc_run(runner, ["--config", os.path.join(where, "diffcdc.toml")],
                                     os.path.join(where, f"log-{step}-{r}"), f"{sink} {step}")
                if record["exit_code"] != 0:
                    raise SystemExit(f"{sink} {step} failed: {record.get('stderr_tail')}")
                check(record, expected_counts(folder, index))
                line(f"{sink} {step} round {r + 1}", record)
                runs[sink][step].append(record)
        for sink in sinks:
            server.sql(f'DROP TABLE IF EXISTS public."orders_{r}_{sink}"')
    shutil.rmtree(os.path.join(work, "postgres-bench"), ignore_errors=True)

    def med(sink: str, step: str, field: str = "seconds") -> float:
        return round(statistics.median(
            r[field] if field == "seconds" else (r.get("phases") or {}).get(field, 0.0)
            for r in runs[sink][step]), 3)

    first = med("postgres", "first_load")
    steady_pg, steady_delta = med("postgres", "steady"), med("delta", "steady")
    publish_pg = med("postgres", "steady", "publish")
    publish_delta = med("delta", "steady", "publish")
    ratio = round(steady_pg / steady_delta, 3)
    scd2 = {}
    if history:
        scd2 = {"history": {
            "first_load_postgres_seconds": med("postgres-scd2", "first_load"),
            "first_load_delta_seconds": med("delta-scd2", "first_load"),
            "steady_postgres_seconds": med("postgres-scd2", "steady"),
            "steady_delta_seconds": med("delta-scd2", "steady"),
            "steady_postgres_vs_delta": round(med("postgres-scd2", "steady")
                                              / med("delta-scd2", "steady"), 3),
            "publish_postgres_seconds": med("postgres-scd2", "steady", "publish"),
            "publish_delta_seconds": med("delta-scd2", "steady", "publish")}}
    return {**scd2,
        "rows": rows, "rounds": rounds, "runs": runs,
        "first_load": {"postgres_seconds": first, "delta_seconds": med("delta", "first_load"),
                       "postgres_rows_per_s": round(rows / first)},
        "steady": {"postgres_seconds": steady_pg, "delta_seconds": steady_delta,
                   "postgres_vs_delta": ratio, "publish_postgres_seconds": publish_pg,
                   "publish_delta_seconds": publish_delta,
                   "publish_postgres_vs_delta": (round(publish_pg / publish_delta, 3)
                                                 if publish_delta else None)},
        "goal": {"first_load_rows_per_s": GOAL_FIRST_LOAD_ROWS_PER_S,
                 "steady_x_delta": GOAL_STEADY_X_DELTA,
                 "met": rows / first >= GOAL_FIRST_LOAD_ROWS_PER_S
                 and ratio <= GOAL_STEADY_X_DELTA},
        "all_match_truth": all(r["matches_truth"] for s in runs.values() for v in s.values()
                               for r in v),
    }


if __name__ == "__main__":
    raise SystemExit(main())
