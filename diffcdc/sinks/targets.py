"""Where sinks write, compared before anything runs: two sinks never share a target.

Every sink config names its targets (:class:`SinkTarget`): a Delta table's folder, an Open
Mirroring table folder and the landing root it lies in, a Kafka topic and the producer's
transactional id on a cluster. :func:`target_clash` finds two that cannot work side by side —
one folder written by two sinks (or one inside the other), one topic or transactional id used
twice on one cluster, two ``_partnerEvents.json`` for one landing root — so a config that
cannot work is refused when it is loaded, not after a commit.

Locations are compared normalised: a local path absolute, without trailing slashes, ``.``/``..``
and symbolic links; a URL with its scheme and host in lower case and the ADLS Gen2 spellings
(``abfss://fs@account.dfs...`` and ``https://account.dfs.../fs``) made one; Kafka brokers in lower
case with their default port and the addresses their host names resolve to.
"""

from __future__ import annotations

import functools
import os
import posixpath
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

#: What a target is: a ``folder`` belongs to one sink (nothing else inside it); a landing
#: ``root`` is shared by the Open Mirroring table folders (``landing_table``) in it; a ``topic``
#: or a ``txn`` (transactional id) belongs to one sink on a Kafka cluster.
TargetKind = Literal["folder", "landing_table", "root", "topic", "txn", "db_table"]


@dataclass(frozen=True)
class SinkTarget:
    """One place a sink writes to, for comparing it with every other sink's."""

    kind: TargetKind
    key: str  #: the config field that names it (``path``, ``landing``, ``topic`` ...)
    location: str  #: normalised folder, or the topic / transactional id
    shown: str  #: as the user wrote it (no secrets: a SAS token is never in a location)
    servers: frozenset[str] = frozenset()  #: a Kafka target's brokers (``host:port``)
    #: What must be the same for every sink sharing a landing root (its _partnerEvents.json).
    shared: str | None = None


@dataclass(frozen=True)
class OwnedTarget:
    """A target with the table and sink it belongs to (for messages)."""

    table: str  #: the table as messages name it (``'T'`` or ``'T' (schema 's')``)
    sink: str
    target: SinkTarget


def folder_location(path: str) -> str:
    """``path`` normalised for comparison: an absolute real path, or a canonical URL."""
    text = path.strip()
    if text.startswith("file:"):
        text = text[len("file://"):] if text.startswith("file://") else text[len("file:"):]
    if "://" not in text:
        return os.path.realpath(os.path.abspath(text))
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    host = parts.netloc.rsplit("@", 1)[-1].lower()
    user = unquote(parts.netloc.rsplit("@", 1)[0]) if "@" in parts.netloc else ""
    segments = [unquote(s) for s in parts.path.split("/") if s and s != "."]
    if scheme in ("abfs", "abfss") and user:  # ADLS Gen2: as its https:// spelling
        scheme, segments = "https", [user, *segments]
    elif scheme == "http" and (".dfs." in host or ".blob." in host):
        scheme = "https"
    if ".blob." in host:
        host = host.replace(".blob.", ".dfs.", 1)
    path = posixpath.normpath("/" + "/".join(segments)) if segments else "/"
    return f"{scheme}://{host}{path.rstrip('/') or ''}"


def _inside(inner: str, outer: str) -> bool:
    """Whether folder ``inner`` is ``outer`` or lies below it."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


#: The port a Kafka client uses when a bootstrap server gives none.
KAFKA_DEFAULT_PORT = 9092


#: How long comparing targets waits for a host name to resolve (a config loads without the
#: network too: a name that does not resolve in time is compared as written).
RESOLVE_SECONDS = 2.0


@functools.lru_cache(maxsize=256)
def _addresses(host: str) -> tuple[str, ...]:
    """The addresses ``host`` resolves to (none when it does not resolve here in time)."""
    found: list[str] = []

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return
        found.extend(str(info[4][0]).split("%", 1)[0] for info in infos)

    worker = threading.Thread(target=look_up, daemon=True, name="diffcdc-resolve")
    worker.start()
    worker.join(RESOLVE_SECONDS)
    return tuple(sorted(set(found))) if not worker.is_alive() else ()


def _broker(server: str) -> tuple[str, int]:
    """``(host, port)`` of one bootstrap server: ``[proto://]host[:port]``, ``[v6]:port``."""
    text = server.strip().lower()
    if "://" in text:
        text = text.split("://", 1)[1]
    text = text.rstrip("/")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:  # a bare host, or a bare IPv6 address
        host, port = text, ""
    return host, int(port) if port.isdigit() else KAFKA_DEFAULT_PORT


def kafka_servers(bootstrap_servers: str) -> frozenset[str]:
    """The brokers of a ``host:port,...`` list, normalised: lower case, the default port where
    none is given, and each host name also as the addresses it resolves to (IPv6 in brackets).
    An overlap of two lists means one cluster: ``localhost:9092`` and ``127.0.0.1`` meet."""
    out: set[str] = set()
    for server in bootstrap_servers.split(","):
        if not server.strip():
            continue
        host, port = _broker(server)
        for name in (host, *_addresses(host)):
            out.add(f"[{name}]:{port}" if ":" in name else f"{name}:{port}")
    return frozenset(out)


def _clash(a: SinkTarget, b: SinkTarget) -> tuple[str, str] | None:
    """Why ``a`` and ``b`` cannot both be written and what to do, or None."""
    if "db_table" in (a.kind, b.kind):
        return _db_table_clash(a, b)
    if {a.kind, b.kind} <= {"topic", "txn"}:
        if a.kind == b.kind and a.location == b.location and a.servers & b.servers:
            what = "the Kafka topic" if a.kind == "topic" else "the transactional id"
            fix = "a topic" if a.kind == "topic" else "a transactional_id"
            return (f"both use {what} {a.shown} on "
                    f"{', '.join(sorted(a.servers & b.servers))}", f"give each sink {fix} of its own")
        return None
    if "topic" in (a.kind, b.kind) or "txn" in (a.kind, b.kind):
        return None
    apart = "give each a folder of its own, outside the others'"
    if a.kind == b.kind == "root":
        if a.location == b.location:
            if a.shared is not None and b.shared is not None and a.shared != b.shared:
                return (f"share the landing root {a.shown} with different partner settings "
                        "(one _partnerEvents.json per landing zone)",
                        "give every table of a landing root the same partner settings")
            return None
        if _inside(a.location, b.location) or _inside(b.location, a.location):
            return (f"use the landing roots {a.shown} and {b.shown}, one inside the other",
                    "give landing zones folders side by side")
        return None
    if a.kind != "root" and b.kind != "root":  # two folders, each of one sink
        if a.location == b.location:
            return f"both write to {a.shown}", apart
        if _inside(a.location, b.location) or _inside(b.location, a.location):
            return f"write to {a.shown} and {b.shown}, one inside the other", apart
        return None
    root, other = (a, b) if a.kind == "root" else (b, a)
    if other.kind == "landing_table" and _inside(other.location, root.location):
        return None  # an Open Mirroring table folder in a landing root: what roots are for
    if _inside(other.location, root.location) or _inside(root.location, other.location):
        return (f"write to {other.shown} and the landing root {root.shown}, one inside the "
                "other (the landing zone would take it for a table)", apart)
    return None


def _db_table_clash(a: SinkTarget, b: SinkTarget) -> tuple[str, str] | None:
    """Two sinks writing one database table (``location``: database/schema/table, ``servers``:
    the server's ``host:port``)."""
    if a.kind == b.kind and a.location == b.location and a.servers & b.servers:
        return (f"both write the database table {a.shown} on "
                f"{', '.join(sorted(a.servers & b.servers))}", "give each sink a table of its own")
    return None


def target_clash(targets: Sequence[OwnedTarget]) -> str | None:
    """The first two targets that cannot work side by side, in words, or None."""
    for i, a in enumerate(targets):
        for b in targets[i + 1:]:
            found = _clash(a.target, b.target)
            if found is None:
                continue
            why, fix = found
            if a.table == b.table:
                who = (f"sink {a.sink!r} ({a.target.key}) and sink {b.sink!r} ({b.target.key}) "
                       f"of table {a.table}" if a.sink != b.sink else
                       f"fields {a.target.key} and {b.target.key} of sink {a.sink!r} of "
                       f"table {a.table}")
            else:
                who = (f"table {a.table} sink {a.sink!r} ({a.target.key}) and table {b.table} "
                       f"sink {b.sink!r} ({b.target.key})")
            return f"{who} {why}: {fix}"
    return None


#: The kinds of target that are folders (compared with the source and state folders).
FOLDER_KINDS = ("folder", "landing_table", "root")


def folder_overlap(targets: Sequence[OwnedTarget], folder: str, what: str, why: str
                   ) -> str | None:
    """The first folder target that is ``folder`` or lies inside it (or holds it), in words:
    ``what`` names the folder (``"the table's source folder"``), ``why`` says what would go
    wrong; None when every target lies apart from it."""
    location = folder_location(folder)
    for owned in targets:
        target = owned.target
        if target.kind not in FOLDER_KINDS:
            continue
        if not (_inside(target.location, location) or _inside(location, target.location)):
            continue
        how = ("is" if target.location == location
               else "lies inside" if _inside(target.location, location) else "holds")
        return (f"table {owned.table} sink {owned.sink!r} ({target.key}) writes to "
                f"{target.shown}, which {how} {what} {folder}: {why}; give the sink a folder "
                f"outside it")
    return None


def own(table: str, sink: str, targets: Iterable[SinkTarget]) -> list[OwnedTarget]:
    """``targets`` of one sink with its table and sink id."""
    return [OwnedTarget(table, sink, t) for t in targets]
