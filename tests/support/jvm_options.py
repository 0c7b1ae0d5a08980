"""The JVMs the tests start compile with the client compiler only (C1, no C2).

Every JVM of the suite is short-lived or runs tiny jobs: the test session's driver, each
``diffcdc run`` subprocess (a kill point's process, the CLI tests), the Spark Connect server,
the standalone cluster's executors, the PySpark 3.5 runs. C2 spends most of such a JVM's CPU
compiling code it barely runs; without it a killed ``diffcdc run`` reaches its kill point in
about a quarter less time on 2 cores, and the in-process runs are no slower.

The option goes in as ``spark.driver.defaultJavaOptions`` and
``spark.executor.defaultJavaOptions`` of a ``spark-defaults.conf`` in a folder of the tests'
own, named by ``SPARK_CONF_DIR`` (``spark-submit``, which starts every driver JVM PySpark
launches, reads it; the child processes inherit the variable). Spark puts a
``defaultJavaOptions`` before the ``extraJavaOptions`` diffcdc sets (the class-data-sharing
archive), so those stay as they are. A ``SPARK_CONF_DIR`` already set is left alone.
"""

from __future__ import annotations

import os
import shutil
import tempfile

#: The JVM option: stop at tier 1 (the client compiler).
CLIENT_COMPILER = "-XX:TieredStopAtLevel=1"
DEFAULTS = (
    f"spark.driver.defaultJavaOptions {CLIENT_COMPILER}\n"
    f"spark.executor.defaultJavaOptions {CLIENT_COMPILER}\n"
)


def use_client_compiler() -> str | None:
    """Point ``SPARK_CONF_DIR`` at a new folder whose ``spark-defaults.conf`` holds
    :data:`DEFAULTS`; the folder (None when ``SPARK_CONF_DIR`` was already set, and nothing
    changed). Call it before the first JVM starts; :func:`remove` when the session ends."""
    if os.environ.get("SPARK_CONF_DIR"):
        return None
    folder = tempfile.mkdtemp(prefix="diffcdc-tests-spark-conf-")
    with open(os.path.join(folder, "spark-defaults.conf"), "w", encoding="utf-8") as handle:
        handle.write(DEFAULTS)
    os.environ["SPARK_CONF_DIR"] = folder
    return folder


def remove(folder: str | None) -> None:
    """Undo :func:`use_client_compiler` (nothing when it changed nothing)."""
    if folder is None:
        return
    if os.environ.get("SPARK_CONF_DIR") == folder:
        del os.environ["SPARK_CONF_DIR"]
    shutil.rmtree(folder, ignore_errors=True)
