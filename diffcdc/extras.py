"""The optional libraries: which pip extra brings each, and the one-line error when one is missing.

``pip install diffcdc`` brings what a run publishing to a local landing folder needs; a sink,
a storage backend or the great-expectations part of the gate that needs more names its extra
here (``diffcdc[delta]``, ``[kafka]``, ``[postgres]``, ``[adls]``, ``[gx]``; ``[all]`` is every one of them).
A config that uses one whose library is missing is refused when it is loaded, before Spark
starts (:func:`diffcdc.extras_check.check_config`), in one line naming the extra to install (exit 2); the code that
uses a library imports it only when it is used.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache

from diffcdc.errors import ConfigError


@dataclass(frozen=True)
class Extra:
    """One pip extra of diffcdc: what needs it, the library it brings, the modules to find."""

    name: str
    """The extra's name: ``pip install 'diffcdc[<name>]'``."""
    user: str
    """What needs it, as a message names it ("the Delta sink")."""
    library: str
    """The library, as a message names it ("the deltalake library")."""
    modules: tuple[str, ...]
    """Modules that must be importable (found, not imported: a check costs no import)."""

    @property
    def install(self) -> str:
        return f"pip install 'diffcdc[{self.name}]'"


DELTA = Extra("delta", "the Delta sink", "the deltalake library", ("deltalake",))
KAFKA = Extra("kafka", "the Kafka sink", "the confluent-kafka and fastavro libraries",
              ("confluent_kafka", "fastavro"))
ADLS = Extra("adls", "a location on ADLS Gen2 / OneLake", "the Azure SDK's azure-storage-file-datalake",
             ("azure.core", "azure.storage.filedatalake"))
#: ``azure.identity``'s DefaultAzureCredential: an ADLS location without a key or SAS token.
ADLS_IDENTITY = Extra("adls", "signing in to ADLS Gen2 / OneLake without a key or SAS token",
                      "the azure-identity library", ("azure.identity",))
POSTGRES = Extra("postgres", "the PostgreSQL sink", "the psycopg library (version 3)",
                 ("psycopg",))
GX = Extra("gx", "the quality gate's great-expectations part",
           "the great_expectations library", ("great_expectations",))

#: OpenLineage events (``[lineage]``, docs/lineage.md) and the Prometheus metrics file
#: (``[metrics]``, ``--metrics-file``, docs/metrics.md).
LINEAGE = Extra("lineage", "OpenLineage events ([lineage])", "the openlineage-python client",
                ("openlineage.client",))
METRICS = Extra("metrics", "the metrics file ([metrics], --metrics-file)",
                "the prometheus-client library", ("prometheus_client",))

#: Every extra of diffcdc by name (``all`` is their union, in pyproject.toml).
EXTRAS: dict[str, Extra] = {e.name: e for e in (DELTA, KAFKA, POSTGRES, ADLS, GX, LINEAGE, METRICS)}



@lru_cache(maxsize=None)
def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing (or blocked in sys.modules)
        return False


def missing(extra: Extra) -> str | None:
    """The first of ``extra``'s modules that cannot be imported here (None: all can)."""
    return next((m for m in extra.modules if not _found(m)), None)


def require(extra: Extra, *, table: str | None = None, where: str | None = None,
            path: str | None = None) -> None:
    """Raise the one-line error when ``extra``'s library is missing.

    ``where`` says what in the table needs it (``sink delta``, ``state``), ``path`` the config
    file it came from.
    """
    if missing(extra) is None:
        return
    head = f"{where}: " if where else ""
    raise ConfigError(f"{head}{extra.user} needs {extra.library} (not installed)",
                      table=table, path=path, hint=extra.install)
