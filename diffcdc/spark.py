"""The one place a SparkSession is built.

Default: ``local[*]`` on this machine. On a cluster, pass ``master`` (``spark://host:7077``,
``yarn``, ``k8s://...``) and any Spark settings through ``conf``; the settings below that the
engine's correctness relies on are always applied on top.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings diffcdc's output depends on; user settings cannot change these.
REQUIRED_CONF: dict[str, str] = {
    # Fingerprints and landing files are defined on UTC instants, never the host's zone.
    "spark.sql.session.timeZone": "UTC",
    # Open Mirroring reads Parquet logical timestamps, not the legacy INT96 encoding.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    # No _SUCCESS markers inside staged folders.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.memory": "2g",
    # Throughput collector: a diff is a batch job, pauses do not matter, CPU does. Measured at
    # 5M rows on 2 cores: steady run 15.6 s with G1 (the JDK default), 12.7 s with ParallelGC.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
    "spark.executor.extraJavaOptions": "-XX:+UseParallelGC",
    # Parquet is decoded into off-heap column batches: full rows (first load, changed rows)
    # then create no garbage. Measured at 5M rows: changed-row read 1.80 → 1.28 s, first
    # load 24.1 → 20.9 s (benchmarks/README.md).
    "spark.sql.columnVector.offheap.enabled": "true",
}


#: Incremented each time :func:`build_spark` starts a JVM (tests: "no Spark for no work").
jvm_starts = 0


def build_spark(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "diffcdc",
    console_log: str | None = None,
) -> SparkSession:
    """Return the active SparkSession or build one with diffcdc's settings.

    ``console_log``: a file that receives the JVM's console output (the Spark banner, log4j
    lines, warnings) instead of this process's terminal. The JVM (``spark-submit``) inherits
    its stdout and stderr when PySpark starts it, so the gateway is launched here with both
    pointing at the file; Python workers forked by the JVM inherit them too.
    """
    global jvm_starts
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in REQUIRED_CONF.items():
            if key.startswith("spark.sql."):
                active.conf.set(key, value)
        return active
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    master = master or os.environ.get("DIFFCDC_SPARK_MASTER", "local[*]")
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(DEFAULT_CONF)
    if master.startswith("local"):
        # A local run talks to itself only: keep the driver on the loopback interface.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    settings.update(REQUIRED_CONF)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if console_log is not None:
        _start_jvm_logging_to(console_log, master, app_name, settings)
    jvm_starts += 1
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("DIFFCDC_SPARK_LOG_LEVEL", "WARN"))
    return spark


def _start_jvm_logging_to(path: str, master: str, app_name: str, settings: dict[str, str]) -> None:
    """Start the SparkContext on a JVM whose stdout and stderr go to ``path``.

    ``launch_gateway``'s ``popen_kwargs`` are PySpark's documented way to capture the JVM's
    output; the builder's ``getOrCreate`` then finds this context and uses it. The JVM gets the
    same settings the builder would have passed to ``spark-submit``.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    with open(path, "ab") as out:  # the child keeps its own copy of the descriptor
        gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
    SparkContext(conf=conf, gateway=gateway)


def _python() -> str:
    import sys

    return sys.executable
