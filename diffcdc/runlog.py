"""Each run's log files under the state root: what the terminal does not show.

``<state>/_logs/<run>.log`` gets diffcdc's own log at DEBUG level, with the full trace of every
failure (the terminal shows one line per error); ``<state>/_logs/<run>.spark.log`` gets the
JVM's log4j output (Spark's warnings, task failures with their Java traces), which would
otherwise fill the terminal. The last :data:`KEEP_RUNS` runs' files are kept. ``--debug``
leaves both on the terminal instead.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KEEP_RUNS = 30
LOG_DIR = "_logs"

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c{{1}}: %m%n%ex
"""


@dataclass(frozen=True)
class RunLog:
    """The log files of one run."""

    path: str  #: diffcdc's log
    spark_path: str  #: the JVM's log4j output
    log4j_config: str  #: the log4j2 properties file that sends the JVM's output there


def open_run_log(state_root: str) -> RunLog | None:
    """Create this run's log files and send diffcdc's log there; None if the folder cannot
    be written (the run goes on, logging to the terminal only)."""
    folder = os.path.join(os.path.abspath(state_root), LOG_DIR)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    base = os.path.join(folder, f"run-{stamp}-{os.getpid()}")
    try:
        os.makedirs(folder, exist_ok=True)
        _prune(folder)
        config = base + ".log4j2.properties"
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(_LOG4J2.format(path=base + ".spark.log"))
        handler = logging.FileHandler(base + ".log", encoding="utf-8")
    except OSError as exc:
        logging.getLogger("diffcdc").warning("no run log under %s: %s", folder, exc)
        return None
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
    logger = logging.getLogger("diffcdc")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return RunLog(base + ".log", base + ".spark.log", config)


def logged_spark(
    state_root: str,
    debug: bool,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    jars: Sequence[str] = (),
    remote: str | None = None,
    connect_timeout: float | None = None,
) -> tuple[Any, RunLog | None]:
    """Start Spark with its console output in this run's log files (on the terminal with
    ``debug``, or when the log folder cannot be written); returns the session and the log."""
    from diffcdc.spark.session import build_spark

    opened = None if debug else open_run_log(state_root)
    spark = build_spark(master, conf, log4j_config=opened.log4j_config if opened else None,
                        jvm_output=opened.spark_path if opened else None, jars=jars,
                        remote=remote, connect_timeout=connect_timeout)
    return spark, opened


def _prune(folder: str) -> None:
    """Keep the newest runs' files (names sort by time)."""
    runs = sorted({n.split(".", 1)[0] for n in os.listdir(folder) if n.startswith("run-")})
    for old in runs[: max(0, len(runs) - (KEEP_RUNS - 1))]:
        for name in os.listdir(folder):
            if name.split(".", 1)[0] == old:
                os.unlink(os.path.join(folder, name))
