"""Datasets as the OpenLineage naming conventions name them (openlineage.io/docs/spec/naming):
a namespace and a name, through the client's own naming classes.

A folder is ``file`` + its absolute path, or ``abfss://<container>@<account>.dfs.core.windows.net``
+ its path; a JDBC table ``postgres://host:port`` + ``db.schema.table`` (MySQL/MariaDB:
``mysql://host:port`` + ``db.table``); a Kafka topic ``kafka://host:port`` + the topic. A sink
type names its output through its plug-in (:meth:`~diffcdc.sinks.plugin.SinkPlugin.lineage_dataset`,
by default from the targets it declares), so a new sink brings its own naming.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from diffcdc.sinks.targets import KAFKA_DEFAULT_PORT, SinkTarget, folder_location
from diffcdc.sources.plugin import SourceTable
from diffcdc.sources.registry import source_folder

#: Default ports of the JDBC subprotocols the naming spec has a scheme for.
_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}
#: The port an HDFS namenode answers on when its URL gives none.
_HDFS_PORT = 8020


@dataclass(frozen=True)
class DatasetName:
    """One dataset: the OpenLineage namespace and name."""

    namespace: str
    name: str


def _host_port(authority: str) -> tuple[str, str]:
    """``(host, port)`` of ``[user[:password]@]host[:port]`` (IPv6 in brackets, kept so); the
    credentials never come out."""
    text = authority.rsplit("@", 1)[-1]
    if text.startswith("["):
        host, _, rest = text.partition("]")
        return host + "]", rest[1:] if rest.startswith(":") else ""
    host, _, port = text.partition(":")
    return host, port


def folder_dataset(path: str) -> DatasetName:
    """A folder (local, a mount, ADLS Gen2 / OneLake, HDFS, S3, GCS) as a dataset."""
    from openlineage.client.naming.dataset import ABFSS, GCS, HDFS, S3, LocalFileSystem

    location = folder_location(path)  # absolute, or scheme://host/path (no credentials)
    if "://" not in location:
        naming: Any = LocalFileSystem(path=location)
        return DatasetName(naming.get_namespace(), naming.get_name())
    parts = urlsplit(location)
    scheme, netloc = parts.scheme.lower(), parts.netloc.rsplit("@", 1)[-1].lower()
    segments = [unquote(s) for s in parts.path.split("/") if s]
    path_text = "/" + "/".join(segments)
    if ".dfs." in netloc and segments:  # ADLS Gen2 / OneLake: https://host/container/path
        rest = "/" + "/".join(segments[1:])
        if netloc.endswith(".dfs.core.windows.net"):
            naming = ABFSS(container=segments[0], service=netloc.split(".")[0], path=rest)
            return DatasetName(naming.get_namespace(), naming.get_name())
        # OneLake (onelake.dfs.fabric.microsoft.com ...): the host as it is, not renamed
        return DatasetName(f"abfss://{segments[0]}@{netloc}", rest)
    if scheme == "hdfs":
        host, port = _host_port(netloc)
        naming = HDFS(namenode_host=host, namenode_port=port or str(_HDFS_PORT), path=path_text)
    elif scheme in ("s3", "s3a", "s3n"):
        naming = S3(bucket_name=netloc, object_key=path_text)
    elif scheme == "gs":
        naming = GCS(bucket_name=netloc, object_key=path_text)
    else:  # webhdfs:// and any other store: its scheme and authority, as Spark's names say
        return DatasetName(f"{scheme}://{netloc}", path_text)
    return DatasetName(naming.get_namespace(), naming.get_name())


def kafka_dataset(servers: Sequence[str], topic: str) -> DatasetName:
    """A topic on the cluster of ``servers`` (``[protocol://]host[:port]``; the first in order
    names it, with the default port where it gives none)."""
    from openlineage.client.naming.dataset import Kafka

    named = sorted(_kafka_server(s) for s in servers if s.strip())
    host, port = named[0] if named else ("localhost", "")
    naming = Kafka(bootstrap_server_host=host, port=port or str(KAFKA_DEFAULT_PORT), topic=topic)
    return DatasetName(naming.get_namespace(), naming.get_name())


def _kafka_server(server: str) -> tuple[str, str]:
    text = server.strip().lower()
    text = text.split("://", 1)[1] if "://" in text else text
    text = text.rstrip("/").rsplit("@", 1)[-1]
    if not text.startswith("[") and text.count(":") > 1:  # a bare IPv6 address
        return f"[{text}]", ""
    return _host_port(text)


def _jdbc_place(url: str) -> tuple[str, str, str, str]:
    """``(protocol, host, port, database)`` of a JDBC URL: ``jdbc:proto://host[:port][,more
    hosts]/db[?params]``, ``jdbc:proto:db``, ``jdbc:proto://host;databaseName=db;...`` or
    ``jdbc:proto:driver:@host:port/db``; the first host names it, no credential comes out."""
    rest = url[len("jdbc:"):] if url.lower().startswith("jdbc:") else url
    protocol, _, rest = rest.partition(":")
    protocol = protocol.lower()
    if "@" in rest and not rest.startswith("//"):  # jdbc:oracle:thin:[user/x]@host:port/db
        rest = "//" + rest.rsplit("@", 1)[1].lstrip("/")
    if not rest.startswith("//"):  # jdbc:postgresql:database
        return protocol, "localhost", str(_PORTS.get(protocol, "")), \
            re.split(r"[?;]", rest)[0] or "default"
    authority, tail = re.match(r"([^/?;]*)(.*)", rest[2:]).groups()  # type: ignore[union-attr]
    host, port = _host_port(authority.rsplit("@", 1)[-1].split(",")[0])
    database = re.split(r"[?;]", tail.lstrip("/"))[0]
    if not database:  # SQL Server's ;databaseName=db
        found = re.search(r";\s*database(?:name)?\s*=\s*([^;]+)", tail, re.I)
        database = found.group(1).strip() if found else "default"
    return protocol, host.lower() or "localhost", port or str(_PORTS.get(protocol, "")), \
        unquote(database)


def _relation(text: str, protocol: str) -> list[str]:
    """The parts of a table name as SQL reads it: ``"a.b".c`` is two parts; a quoted part kept
    as written, an unquoted one folded to lower case where the database folds it
    (PostgreSQL)."""
    quotes = {"postgresql": '"', "mysql": "`", "mariadb": "`"}.get(protocol, '"')
    parts = re.findall(rf'\s*({quotes}(?:[^{quotes}]|{quotes}{quotes})*{quotes}|[^.]+)\s*(?:\.|$)',
                       text)
    out = []
    for part in parts:
        part = part.strip()
        if len(part) > 1 and part[0] == part[-1] == quotes:
            out.append(part[1:-1].replace(quotes * 2, quotes))
        else:
            out.append(part.lower() if protocol == "postgresql" else part)
    return out or [text]


def jdbc_dataset(url: str, table: str | None) -> DatasetName:
    """A JDBC source's table (``table`` None: a query; named by its database)."""
    from openlineage.client.naming.dataset import MySQL, Postgres

    protocol, host, port, database = _jdbc_place(url)
    relation = _relation(table, protocol) if table else ["query"]
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


def postgres_dataset(host: str, port: int | str, database: str, schema: str, table: str) -> DatasetName:
    """A PostgreSQL table (a sink's target): ``postgres://host:port`` and ``database.schema.table``."""
    from openlineage.client.naming.dataset import Postgres

    naming = Postgres(host=host, port=str(port), database=database, schema=schema, table=table)
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
