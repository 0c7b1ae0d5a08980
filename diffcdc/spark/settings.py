"""The Spark settings diffcdc applies: its defaults for a session it builds, the settings its
output depends on (applied to any session, a caller's borrowed one put back as it was)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
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
    # CSV snapshots in any Java charset (cp1252 ...), not only Spark 4's seven: diffcdc checks
    # the bytes against the table's csv_encoding itself, strictly, before Spark reads them.
    "spark.sql.legacy.javaCharsets": "true",
    # No _SUCCESS markers inside staged folders.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    # Tables run concurrently (``parallelism``), each in its own pool: one large table's
    # tasks do not queue the small ones behind it.
    "spark.scheduler.mode": "FAIR",
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
    # PySpark otherwise records the Python call site of every Column and DataFrame call in the
    # JVM (five more Py4J round trips each: 1.3-3 ms for an ``F.col``), for error messages
    # diffcdc replaces with its own one-line ones. A small table's run makes hundreds of them.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def session_settings(
    master: str | None,
    conf: Mapping[str, str] | None,
    submitted: Mapping[str, str] | None,
    jars: Sequence[str] = (),
) -> dict[str, str]:
    """The settings of a new session, ``spark.master`` among them.

    Order: diffcdc's defaults, then what ``spark-submit`` was given (``submitted``: its
    ``--master``, ``--conf`` and ``spark-defaults.conf``, None when diffcdc starts the JVM
    itself), then ``conf`` (``[spark] conf``), then :data:`REQUIRED_CONF`. ``master`` (the
    ``--master`` option, ``[spark] master``) wins over the submitted one; with neither it is
    ``local[*]``.
    """
    given = dict(submitted or {})
    settings = {**DEFAULT_CONF, **given}
    settings["spark.master"] = master or given.get("spark.master") or "local[*]"
    if settings["spark.master"].startswith("local") and submitted is None:
        # A local run talks to itself only: keep the driver on the loopback interface.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    if jars:
        listed = [j for j in settings.get("spark.jars", "").split(",") if j]
        settings["spark.jars"] = ",".join(listed + [j for j in jars if j not in listed])
    settings.update(REQUIRED_CONF)
    return settings


def submitted_conf() -> dict[str, str] | None:
    """What ``spark-submit`` started this driver with, or None when it did not.

    ``spark-submit app.py`` starts the driver JVM first (with ``--master``, ``--conf``,
    ``spark-defaults.conf`` as its system properties) and hands this Python process its gateway
    (``PYSPARK_GATEWAY_PORT``); those settings must not be replaced by diffcdc's defaults.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to the running JVM, starts nothing
    return dict(SparkConf().getAll())


#: Required settings a run can do without when a session refuses them (a platform that allows
#: only some settings, as Databricks serverless does): CSV snapshots in Spark's own charsets.
OPTIONAL_CONF = frozenset({"spark.sql.legacy.javaCharsets"})


def require_settings(spark: SparkSession) -> SparkSession:
    """Apply the session settings diffcdc's output depends on to a running session; one that
    the session refuses is a one-line :class:`ConfigError` (unless it already has the value,
    or the run can do without it)."""
    import logging

    from diffcdc.errors import ConfigError

    for key, value in REQUIRED_CONF.items():
        if not key.startswith("spark.sql."):
            continue
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # the platform does not let a session change it
            if _setting(spark, key) == value:
                continue
            if key in OPTIONAL_CONF:
                logging.getLogger("diffcdc").warning(
                    "this Spark session does not let diffcdc set %s (%s): CSV snapshots can be "
                    "read in Spark's own charsets only", key, first_line(exc))
                continue
            raise ConfigError(
                f"this Spark session does not let diffcdc set {key} = {value}, which its "
                f"output depends on: {first_line(exc)}",
                hint=f"allow the setting for this session, or set {key} = {value} in the "
                "cluster's Spark configuration; nothing was read or written",
            ) from None
    return spark


def _setting(spark: SparkSession, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a session that cannot even say
        return None
    return None if value is None else str(value)


#: The session settings a run changes in a session it is handed (:func:`require_settings`).
SESSION_KEYS = tuple(k for k in REQUIRED_CONF if k.startswith("spark.sql."))
ZONE = "spark.sql.session.timeZone"


@dataclass(frozen=True)
class CallerSettings:
    """A borrowed session's settings as the caller had them (None: not set, Spark's default)."""

    values: Mapping[str, str | None]
    #: The caller's session time zone, in effect (set or Spark's default): a zone-less
    #: timestamp in the caller's DataFrame means a time in this zone.
    time_zone: str


@contextlib.contextmanager
def borrowed_session(spark: SparkSession) -> Iterator[CallerSettings]:
    """Apply diffcdc's settings to a caller's session for the ``with`` block, then put every
    one of them back as the caller had it (also when the block fails): a library leaves the
    session it was handed as it found it (``run_dataframe`` in a notebook)."""
    caller = CallerSettings({key: _setting(spark, key) for key in SESSION_KEYS},
                            str(spark.conf.get(ZONE)))
    try:
        require_settings(spark)
        yield caller
    finally:
        for key, value in caller.values.items():
            if _setting(spark, key) == value:
                continue  # never changed (also: one the session does not let anyone set)
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextlib.contextmanager
def in_time_zone(spark: SparkSession, zone: str | None) -> Iterator[None]:
    """Run the block with the session in ``zone`` (None: leave it), then back in UTC.

    For evaluating a caller's DataFrame as the caller would: a zone-less timestamp (a CSV
    column, a ``to_timestamp`` of a string) means a time in the caller's zone, and Spark reads
    the session's zone when the query runs, not when the DataFrame was built. What diffcdc then
    does with the values (Parquet instants, fingerprints on microseconds) is zone-free.
    """
    if zone is None or zone == REQUIRED_CONF[ZONE]:
        yield
        return
    spark.conf.set(ZONE, zone)
    try:
        yield
    finally:
        spark.conf.set(ZONE, REQUIRED_CONF[ZONE])


def first_line(exc: BaseException) -> str:
    """An exception's first line (at most 300 characters), for one-line errors."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]

