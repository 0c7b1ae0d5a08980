"""The log file of one run: ``<state root>/_logs/run-<run id>.log``, the last few kept.

It holds what a person needs after the fact and the terminal does not show: every progress
line with its time stamp, the JVM's console output (Spark banner, log4j warnings and errors,
Py4J messages) and the full Python trace of each failed table. The terminal keeps the one-line
errors; ``--debug`` shows the JVM's output and the traces there as well.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass

#: Log files kept per state root (oldest removed first).
KEEP_LOGS = 20
LOG_DIR = "_logs"

#: Loggers whose lines go to the file: ours, the failed tables' traces, and the warnings and
#: errors of Py4J and PySpark (their levels are left as they are).
_LOGGERS = ("diffcdc", "diffcdc.trace", "py4j", "pyspark")


class IsoFormatter(logging.Formatter):
    """ISO-8601 time stamps with the zone, e.g. ``2026-11-23T08:59:36+01:00``."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return dt.datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="seconds")


@dataclass
class RunLog:
    """The log file of one command (``run``, ``reload``)."""

    path: str
    handler: logging.Handler | None = None

    @classmethod
    def open(cls, state_root: str, command: str, run_id: str, keep: int = KEEP_LOGS) -> RunLog:
        """Create the file (and ``_logs/``), drop the oldest beyond ``keep``, attach loggers."""
        folder = os.path.join(os.path.abspath(state_root), LOG_DIR)
        os.makedirs(folder, exist_ok=True)
        log = cls(os.path.join(folder, f"{command}-{run_id}.log"))
        rotate(folder, keep - 1)
        handler = logging.FileHandler(log.path, encoding="utf-8", delay=False)
        handler.setFormatter(IsoFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.DEBUG)
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            if name.startswith("diffcdc") and logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)  # progress lines reach the file also when quiet
        log.handler = handler
        return log

    def close(self) -> None:
        if self.handler is None:
            return
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(self.handler)
        self.handler.close()
        self.handler = None


def rotate(folder: str, keep: int) -> list[str]:
    """Remove the oldest ``*.log`` files of ``folder`` beyond ``keep`` (names sort by time)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
    except FileNotFoundError:
        return []
    names.sort(key=lambda n: n.split("-", 1)[-1])  # run-/reload-: by run id, i.e. by time
    old = names[: max(len(names) - keep, 0)]
    for name in old:
        try:
            os.unlink(os.path.join(folder, name))
        except FileNotFoundError:
            pass
    return old


def spark_log(state_root: str, command: str, debug: bool) -> RunLog | None:
    """The log file for a command that only needs Spark's output kept off the terminal
    (``verify``, ``demo``): under an existing state root; None with ``--debug``."""
    if debug or not os.path.isdir(state_root):
        return None
    from diffcdc.state.store import new_run_id

    return RunLog.open(state_root, command, new_run_id())
