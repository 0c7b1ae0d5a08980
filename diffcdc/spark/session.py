"""The one place a SparkSession is built, and what kind of session it is.

Default: ``local[*]`` on this machine. On a cluster, pass ``master`` (``spark://host:7077``,
``yarn``, ``k8s://...``) and any Spark settings through ``conf``; the settings that the
engine's correctness relies on (:mod:`diffcdc.spark.settings`) are always applied on top.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from diffcdc.spark.connect import DEFAULT_CONNECT_TIMEOUT, connect_session, connect_url, redact
from diffcdc.spark.settings import require_settings, session_settings, submitted_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process: no
    ``sparkContext``, no RDDs, no Py4J gateway)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def on_this_machine(spark: SparkSession) -> bool:
    """Whether the executors are this process's own children on this machine (a classic
    session with a ``local[...]`` master). Never so for a Spark Connect session: its driver is
    the server's process, wherever the server runs."""
    if is_connect(spark):
        return False
    return str(spark.sparkContext.master).startswith("local")


def spark_label(spark: SparkSession) -> str:
    """What the session runs on, for messages: its master, or its Spark Connect server."""
    if is_connect(spark):
        url = connect_url(spark)
        return f"the Spark Connect server {url}" if url else "the Spark Connect server"
    return str(spark.sparkContext.master)


#: Incremented each time :func:`build_spark` starts a JVM (tests: "no Spark for no work").
jvm_starts = 0


def build_spark(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "diffcdc",
    log4j_config: str | None = None,
    jvm_output: str | None = None,
    jars: Sequence[str] = (),
    remote: str | None = None,
    connect_timeout: float | None = None,
) -> SparkSession:
    """Return the active SparkSession or build one with diffcdc's settings; with ``remote``
    (``sc://host:port``, else the ``SPARK_REMOTE`` environment variable) a Spark Connect
    session with that server (:func:`connect_session`; ``connect_timeout``: seconds it may go
    without answering, default :data:`DEFAULT_CONNECT_TIMEOUT`).

    ``log4j_config``: a log4j2 properties file for the driver JVM (see :mod:`diffcdc.runlog`:
    the JVM's output goes to the run's log file instead of the terminal); ``jvm_output``: a
    file for what the JVM itself writes to its stderr (start-up warnings, crashes). ``jars``
    (JDBC drivers) go onto the classpath of a new session, beside any ``spark.jars`` in
    ``conf``; a running session cannot load jars any more (a JDBC source then says which
    driver is missing).
    """
    from pyspark.sql import SparkSession

    remote = chosen_remote(master, remote)
    if remote is not None:
        return connect_session(remote, conf, connect_timeout or DEFAULT_CONNECT_TIMEOUT)
    with _without_env("SPARK_REMOTE"):  # pyspark itself would go to it, master or not
        active = SparkSession.getActiveSession()
        if active is not None:
            return require_settings(active)
        return _classic_session(master, conf, app_name, log4j_config, jvm_output, jars)


def chosen_remote(master: str | None, remote: str | None) -> str | None:
    """The Spark Connect server to use: ``remote`` (``--remote``, ``[spark] remote``), else the
    ``SPARK_REMOTE`` environment variable unless a master was chosen (``--master``, ``[spark]
    master``: an explicit choice beats the environment); None: classic Spark."""
    if remote:
        return remote
    if master:
        return None
    return os.environ.get("SPARK_REMOTE") or None


@contextlib.contextmanager
def _without_env(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def _classic_session(master: str | None, conf: Mapping[str, str] | None, app_name: str,
                     log4j_config: str | None, jvm_output: str | None,
                     jars: Sequence[str]) -> SparkSession:
    """A classic session (a driver JVM of this process) with diffcdc's settings."""
    global jvm_starts
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", _python())
    submitted = submitted_conf()
    master = master or os.environ.get("DIFFCDC_SPARK_MASTER")
    settings = session_settings(master, conf, submitted, jars)
    from diffcdc.cds import java_options

    if submitted is None:  # a JVM diffcdc starts itself; under spark-submit it already runs
        cds = java_options()  # start-up: Spark's classes mapped from an archive (diffcdc.cds)
        if cds:
            key = "spark.driver.extraJavaOptions"
            settings[key] = f"{settings.get(key, '')} {cds}".strip()
    if log4j_config:
        key = "spark.driver.extraJavaOptions"
        settings[key] = f"{settings.get(key, '')} -Dlog4j2.configurationFile=file:{log4j_config}".strip()
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    jvm_starts += 1
    with _stderr_to(jvm_output):  # the JVM inherits file descriptor 2 when it is started
        spark = builder.getOrCreate()
    default_level = "WARN" if log4j_config else "ERROR"  # a log file may hold the warnings
    spark.sparkContext.setLogLevel(os.environ.get("DIFFCDC_SPARK_LOG_LEVEL", default_level))
    return spark


@contextlib.contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """Point this process's file descriptor 2 at ``path`` for a moment (None: leave it)."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def master_label(master: str | None, remote: str | None = None) -> str:
    """The master a new session will use, for the log, before it starts."""
    remote = chosen_remote(master, remote)
    if remote:
        return f"Spark Connect {redact(remote)}"
    chosen = master or os.environ.get("DIFFCDC_SPARK_MASTER")
    if chosen:
        return chosen
    return "spark-submit's master" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"


def _python() -> str:
    return sys.executable


def warm_up() -> None:
    """Load the classes a run loads: read, fingerprint-like hashing, aggregate, join, write
    (:func:`diffcdc.cds.build` runs this in a child process to write its archive)."""
    import tempfile

    from pyspark.sql import functions as F

    from diffcdc.spark.compat import to_arrow

    spark = build_spark("local[1]")
    with tempfile.TemporaryDirectory() as tmp:
        df = spark.range(1000).select(F.col("id"), F.xxhash64("id").alias("fp"),
                                      F.current_timestamp().alias("at"))
        df.write.parquet(os.path.join(tmp, "a"))
        back = spark.read.parquet(os.path.join(tmp, "a"))
        joined = back.join(back.groupBy("id").agg(F.max("fp").alias("m")), "id", "full_outer")
        joined.repartition(2, "id").write.option("compression", "zstd").parquet(os.path.join(tmp, "b"))
        to_arrow(spark.read.parquet(os.path.join(tmp, "b")))
    spark.stop()
