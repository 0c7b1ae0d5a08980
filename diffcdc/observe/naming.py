"""Datasets as the OpenLineage naming conventions name them (openlineage.io/docs/spec/naming):
a namespace and a name, through the client's own naming classes.

A folder is ``file`` + its absolute path, or ``abfss://<container>@<account>.dfs.core.windows.net``
+ its path; a JDBC table ``postgres://host:port`` + ``db.schema.table`` (MySQL/MariaDB:
``mysql://host:port`` + ``db.table``); a Kafka topic ``kafka://host:port`` + the topic. A sink
type names its output through its plug-in (:meth:`~diffcdc.sinks.plugin.SinkPlugin.lineage_dataset`,
by default from the targets it declares), so a new sink brings its own naming.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from diffcdc.sinks.targets import SinkTarget, folder_location
from diffcdc.sources.plugin import SourceTable
from diffcdc.sources.registry import source_folder

#: Default ports of the JDBC subprotocols the naming spec has a scheme for.
_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


@dataclass(frozen=True)
class DatasetName:
    """One dataset: the OpenLineage namespace and name."""

    namespace: str
    name: str


def folder_dataset(path: str) -> DatasetName:
    """A folder (local, a mount, or ADLS Gen2 / OneLake) as a dataset."""
    from openlineage.client.naming.dataset import ABFSS, LocalFileSystem, RemoteFileSystem

    location = folder_location(path)  # absolute, or https://account.dfs.../fs/path
    if "://" not in location:
        naming: Any = LocalFileSystem(path=location)
    else:
        parts = urlsplit(location)
        segments = [unquote(s) for s in parts.path.split("/") if s]
        if parts.hostname and ".dfs." in parts.hostname and segments:
            naming = ABFSS(container=segments[0], service=parts.hostname.split(".")[0],
                           path="/" + "/".join(segments[1:]))
        else:
            naming = RemoteFileSystem(host=f"{parts.scheme}://{parts.netloc}",
                                      path=parts.path or "/")
    return DatasetName(naming.get_namespace(), naming.get_name())


def kafka_dataset(servers: Sequence[str], topic: str) -> DatasetName:
    """A topic on the cluster of ``servers`` (``host:port``; the first one names it)."""
    from openlineage.client.naming.dataset import Kafka

    host, _, port = sorted(servers)[0].rpartition(":")
    naming = Kafka(bootstrap_server_host=host, port=port, topic=topic)
    return DatasetName(naming.get_namespace(), naming.get_name())


def jdbc_dataset(url: str, table: str | None) -> DatasetName:
    """A JDBC source's table (``table`` None: a query; named by its database)."""
    from openlineage.client.naming.dataset import MySQL, Postgres

    parts = urlsplit(url.removeprefix("jdbc:"))
    protocol = parts.scheme.lower()
    host, port = parts.hostname or "localhost", str(parts.port or _PORTS.get(protocol, ""))
    database = parts.path.strip("/").split(";")[0] or "default"
    relation = (table or "query").split(".")
    if protocol == "postgresql":
        schema, name = (relation[-2], relation[-1]) if len(relation) > 1 else ("public", relation[0])
        naming: Any = Postgres(host=host, port=port, database=database, schema=schema, table=name)
    elif protocol in ("mysql", "mariadb"):
        naming = MySQL(host=host, port=port, database=relation[-2] if len(relation) > 1
                       else database, table=relation[-1])
    else:  # another database: its scheme as the namespace, the table as written
        return DatasetName(f"{protocol}://{host}" + (f":{port}" if port else ""),
                           f"{database}.{'.'.join(relation)}")
    return DatasetName(naming.get_namespace(), naming.get_name())


def source_dataset(table: SourceTable) -> DatasetName:
    """A table's source as a dataset: its folder, its JDBC table, or (a DataFrame handed over
    in Python) ``spark`` + its description."""
    source = table.source
    if getattr(source, "type", None) == "jdbc":
        return jdbc_dataset(source.url, source.table)
    folder = source_folder(table)
    if folder is not None:
        return folder_dataset(folder)
    return DatasetName("spark", str(getattr(source, "description", None) or table.name))


def targets_dataset(targets: Sequence[SinkTarget]) -> DatasetName | None:
    """A sink's output from the targets it declares: its table folder (a Delta table, an Open
    Mirroring table folder) or its topic; None when it declares neither."""
    for target in targets:
        if target.kind in ("folder", "landing_table"):
            return folder_dataset(target.location)
        if target.kind == "topic" and target.servers:
            return kafka_dataset(sorted(target.servers), target.location)
    return None
