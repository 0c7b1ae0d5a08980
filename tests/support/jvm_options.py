"""The driver JVMs PySpark starts for the tests compile with the client compiler only (C1, no
C2).

Every such JVM is short-lived or runs tiny jobs: the test session's driver, each ``diffcdc
run`` subprocess (a kill point's process, the CLI tests), the PySpark 3.5 runs. C2 spends most
of such a JVM's CPU compiling code it barely runs; without it a killed ``diffcdc run`` reaches
its kill point in about a quarter less time on 2 cores, and the in-process runs are no slower.

The option goes in as ``--conf spark.driver.defaultJavaOptions=...`` through
``PYSPARK_SUBMIT_ARGS``, which PySpark hands to the ``spark-submit`` that starts its driver JVM
(the child processes inherit the variable). Spark puts a ``defaultJavaOptions`` before the
``extraJavaOptions`` diffcdc sets (the class-data-sharing archive), so those stay as they are.
(Not a ``spark-defaults.conf`` in a ``SPARK_CONF_DIR``: that folder joins the JVM's class path,
and a JVM writing the class-data-sharing archive refuses a class path with a non-empty folder.)
A ``PYSPARK_SUBMIT_ARGS`` already set is left alone.
"""

from __future__ import annotations

import os

#: The JVM option: stop at tier 1 (the client compiler).
CLIENT_COMPILER = "-XX:TieredStopAtLevel=1"
SUBMIT_ARGS = f"--conf spark.driver.defaultJavaOptions={CLIENT_COMPILER} pyspark-shell"
_VARIABLE = "PYSPARK_SUBMIT_ARGS"


def use_client_compiler() -> bool:
    """Set ``PYSPARK_SUBMIT_ARGS`` to :data:`SUBMIT_ARGS` unless it is set; whether it was set
    here. Call it before the first JVM starts; :func:`remove` when the session ends."""
    if os.environ.get(_VARIABLE):
        return False
    os.environ[_VARIABLE] = SUBMIT_ARGS
    return True


def remove(changed: bool) -> None:
    """Undo :func:`use_client_compiler` (nothing when it changed nothing)."""
    if changed and os.environ.get(_VARIABLE) == SUBMIT_ARGS:
        del os.environ[_VARIABLE]
