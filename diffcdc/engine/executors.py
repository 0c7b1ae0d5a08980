"""Can the cluster's executors run diffcdc's Python code? Asked once, before any table runs.

The diff itself is Spark SQL in the JVM, but every commit runs small Python tasks on the
executors: the state manifest (sizes, footer rows and checksums of the state files,
:mod:`diffcdc.state.integrity`) and the tasks of the sinks and sources the run's tables use
(each plug-in names their modules: the landing files' facts and text conversion, the Kafka
sink's Avro encoding; a type no table uses is not asked for), all
through :func:`diffcdc.staged_files.on_executors`, so that files written by executors are read
where they are. Those tasks run with the driver's ``PYSPARK_PYTHON`` (or
``spark.pyspark.python``) on every executor, which must be the driver's Python version and be
able to import diffcdc and its dependencies (pyarrow, pydantic ...). On ``local[...]`` the
executors are the driver's own process tree, so nothing is asked there; a Spark Connect
server's executors are always asked (their Python is the server's). Without this check a
cluster that lacks them fails mid-run with a page of Python trace from inside a task.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from diffcdc.errors import ConfigError
from diffcdc.sinks.registry import executor_modules
from diffcdc.sources.registry import source_executor_modules
from diffcdc.spark.session import on_this_machine, spark_label
from diffcdc.staged_files import on_executors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _probe(items: Iterator[Sequence[str]]) -> Iterator[str]:
    """Runs on an executor: import what diffcdc's tasks import (the imports are the test)."""
    import sys

    for modules in items:
        for module in modules:
            importlib.import_module(module)
        yield f"{sys.version_info[0]}.{sys.version_info[1]}"


#: The module of the Python UDF a ``json`` normalizer runs on the executors.
JSON_MODULE = "diffcdc.core.normalize"
#: diffcdc's own modules every commit runs on the executors (the state manifest).
OWN_MODULES: tuple[str, ...] = ("diffcdc.state.integrity",)


def executor_check_modules(tables: Sequence[Any]) -> tuple[str, ...]:
    """What the executors must import for ``tables``: diffcdc's own modules and those of the
    sinks and sources the tables use — not of every type registered, so a plug-in no table
    uses cannot fail the check of a run that never runs its code."""
    used = (sink.type for table in tables for sink in table.sinks)
    udfs = [JSON_MODULE] if any(table.normalizers.uses_json() for table in tables) else []
    return tuple(dict.fromkeys(
        (*OWN_MODULES, *udfs, *executor_modules(used), *source_executor_modules(tables))))


def check_executor_python(spark: SparkSession, tables: Sequence[Any]) -> None:
    """Raise a one-line :class:`ConfigError` when executors cannot run the tables' Python code."""
    if not tables:
        return
    if on_this_machine(spark):
        return
    master = spark_label(spark)
    try:
        modules = executor_check_modules(tables)
        on_executors(spark, [modules], _probe)
    except Exception as exc:  # a failed task arrives as a Py4J or PySpark error with a trace
        raise ConfigError(
            f"the Spark executors of {master} cannot run diffcdc's Python code, which every "
            f"commit needs (table(s) {', '.join(t.name for t in tables)}): {executor_failure(exc)}",
            hint="install diffcdc (the same version, with its dependencies) into the executors' "
            "Python, the driver's Python version, and point PYSPARK_PYTHON or "
            "spark.pyspark.python at it (or ship a packed environment with spark.archives); "
            "see docs/cluster.md",
        ) from exc


def executor_failure(exc: BaseException) -> str:
    """The last line of a task's Python error (``ModuleNotFoundError: No module named ...``)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if line.split(":", 1)[0].endswith(("Error", "Exception"))]
    pick = errors[-1] if errors else (lines[-1] if lines else type(exc).__name__)
    return pick[:300]
