"""The one place a SparkSession is built.

Default: ``local[*]`` on this machine. On a cluster, pass ``master`` (``spark://host:7077``,
``yarn``, ``k8s://...``) and any Spark settings through ``conf``; the settings below that the
engine's correctness relies on are always applied on top.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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


def build_spark(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "diffcdc",
    jars: Sequence[str] = (),
) -> SparkSession:
    """Return the active SparkSession or build one with diffcdc's settings.

    ``jars`` (JDBC drivers) go onto the classpath of a new session, beside any ``spark.jars``
    in ``conf``; a running session cannot load jars any more (a JDBC source then says which
    driver is missing).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return require_settings(active)
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    master = master or os.environ.get("DIFFCDC_SPARK_MASTER", "local[*]")
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(DEFAULT_CONF)
    if master.startswith("local"):
        # A local run talks to itself only: keep the driver on the loopback interface.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    if jars:
        given = [j for j in settings.get("spark.jars", "").split(",") if j]
        settings["spark.jars"] = ",".join(given + [j for j in jars if j not in given])
    settings.update(REQUIRED_CONF)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("DIFFCDC_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def require_settings(spark: SparkSession) -> SparkSession:
    """Apply the session settings diffcdc's output depends on to a running session."""
    for key, value in REQUIRED_CONF.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    return spark


def _python() -> str:
    import sys

    return sys.executable
