"""Every sink diffcdc has, as the contract tests see them: how to configure one in a temp dir,
and how to prove that it holds each change exactly once.

The contract itself (tests/test_sink_contract.py) runs one body over every kind here: replaying
a sink's published output must give the latest snapshot, and a process killed at any step (also
inside each sink's publishing) must neither lose nor repeat anything in any sink.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diffcdc.state.store import TableState
from tests.support.history import DEFAULT, Names


@dataclass
class SinkKind:
    """One sink variant: its config entry and its own 'nothing twice' check."""

    name: str
    #: The sink type (a plug-in of diffcdc.sinks.registry; every one has a kind here).
    type: str
    #: (temp root, servers) → the sink's entry in ``[[tables.T.sinks]]``.
    entry: Callable[[str, dict[str, Any]], dict[str, Any]]
    #: (state, sink id, servers) → raises AssertionError if anything was applied twice.
    assert_once: Callable[[TableState, str, dict[str, Any]], None]
    #: Crash points inside this sink's publishing (``DIFFCDC_CRASH_AT`` values).
    crash_points: tuple[str, ...] = ()
    #: Name of the server fixture it needs (``servers[...]``), if any.
    server: str | None = None
    #: (state, sink id, servers, how) → changes the target behind diffcdc's back: ``"foreign"``
    #: another writer changes it, ``"gone"`` it is deleted.
    tamper: Callable[[TableState, str, dict[str, Any], str], None] | None = None


def _landing_once(state: TableState, sink_id: str, read: Callable[[str], bytes | None]) -> None:
    """Every landing file a commit names is there with exactly that content; no other file."""
    expected = {}
    folder = None
    for commit in state.commits():
        entry = commit.record.sinks.get(sink_id)
        if entry is None:
            continue
        if commit.record.recreate is not None or entry.manifest.get("initial"):
            expected = {}
        folder = entry.manifest["landing_folder"]
        for f in entry.manifest["files"]:
            expected[f["name"]] = f["sha256"]
    assert folder is not None
    for name, sha in expected.items():
        data = read(f"{folder}/{name}")
        assert data is not None, f"{name} missing"
        assert hashlib.sha256(data).hexdigest() == sha, f"{name} differs from its commit"


def _local_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "open_mirroring", "name": "landing_local",
            "landing": os.path.join(root, "landing"), "max_rows_per_file": 3}


def _local_once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    manifest = state.head().record.sinks[sink_id].manifest
    landing = manifest["landing"]

    def read(path: str) -> bytes | None:
        full = os.path.join(landing, path)
        if not os.path.exists(full):
            return None
        with open(full, "rb") as handle:
            return handle.read()

    _landing_once(state, sink_id, read)
    folder = os.path.join(landing, manifest["landing_folder"])
    numbered = sorted(n for n in os.listdir(folder) if n[0].isdigit())
    assert numbered == [f"{i:020d}.parquet" for i in range(1, len(numbered) + 1)], numbered


def _dfs_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    server = servers["dfs"]
    return {"type": "open_mirroring", "name": "landing_dfs", "max_rows_per_file": 3,
            "landing": server.url("ws", f"{os.path.basename(root)}/Files/LandingZone"),
            "landing_options": {"account_key": server.account_key, "retry_backoff": 0.01,
                                "retry_backoff_max": 0.05}}


def _dfs_once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    from diffcdc.sinks.openmirroring.landing import open_landing

    manifest = state.head().record.sinks[sink_id].manifest
    server = servers["dfs"]
    storage = open_landing(manifest["landing"], account_key=server.account_key)
    try:
        _landing_once(state, sink_id, lambda p: storage.read_bytes(p) if storage.stat(p) else None)
    finally:
        storage.close()


def _delta_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "delta", "name": "delta", "path": os.path.join(root, "lake", "t"),
            "changelog_path": os.path.join(root, "lake", "t_changelog")}


def _delta_once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    """One Delta commit per diffcdc version with changes; the feed replays to the table."""
    from deltalake import DeltaTable

    from diffcdc.core.compare import norm_value
    from diffcdc.sinks.delta.feed import feed_of_range, plain_types, replay_change_feed

    commits = state.commits()
    manifest = commits[-1].record.sinks[sink_id].manifest
    table = DeltaTable(manifest["target"])
    tagged = [h.get("diffcdc.version") for h in table.history() if "diffcdc.version" in h]
    with_rows = [str(c.version) for c in commits
                 if sink_id in c.record.sinks and c.record.sinks[sink_id].manifest.get("rows")]
    assert sorted(tagged, key=int) == with_rows, (tagged, with_rows)  # one commit each
    keys = commits[-1].record.keys

    def rows(items: list[dict[str, Any]]) -> list[Any]:  # by name: an added column comes
        # last in the changelog (appended with schema merge), before the feed's own columns
        return sorted((tuple(sorted((k, repr(norm_value(v))) for k, v in r.items()))
                       for r in items), key=repr)

    live = plain_types(table.to_pyarrow_table()).to_pylist()
    assert rows(replay_change_feed(manifest["target"], keys)) == rows(live)
    # the changelog holds each commit's feed exactly once: the same rows as the whole feed
    log = plain_types(DeltaTable(manifest["changelog"]).to_pyarrow_table())
    # a full image (a re-creation) goes into the changelog as its inserts only
    initial = {c.version for c in commits if sink_id in c.record.sinks
               and c.record.sinks[sink_id].manifest.get("initial")}
    images = {r["_commit_version"] for r in log.select(["_diffcdc_version", "_commit_version"])
              .to_pylist() if r["_diffcdc_version"] in initial}
    log = log.drop_columns(["_diffcdc_version", "_diffcdc_incarnation", "__CHANGED_COLUMNS"])
    feed = feed_of_range(table, 0, table.version())
    feed = feed.filter([r["_commit_version"] not in images or r["_change_type"] == "insert"
                        for r in feed.select(["_commit_version", "_change_type"]).to_pylist()])
    assert sorted(log.column("_commit_version").to_pylist()) == sorted(
        feed.column("_commit_version").to_pylist())
    # a column a re-creation removed is gone from the whole feed; the changelog keeps it
    common = [c for c in log.column_names if c in feed.column_names]
    log, feed = log.select(common), feed.select(common)
    missing = set(rows(feed.to_pylist())) - set(rows(log.to_pylist()))
    extra = set(rows(log.to_pylist())) - set(rows(feed.to_pylist()))
    assert rows(log.to_pylist()) == rows(feed.to_pylist()), (sorted(missing)[:2],
                                                             sorted(extra)[:2])


def _history_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "delta", "name": "history", "path": os.path.join(root, "lake", "history"),
            "mode": "scd2"}


def history_once(state: TableState, sink_id: str, names: Names = DEFAULT) -> None:
    """One Delta commit per diffcdc version with changes since the sink's last full image; the
    history's rules hold (with ``names``: its column names, sentinels and tombstones), and as
    of every version since that image it is exactly that version's snapshot."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from tests.support.history import as_of, canonical, check_history, history_rows

    commits = state.commits()
    manifest = commits[-1].record.sinks[sink_id].manifest
    tagged = [h.get("diffcdc.version") for h in DeltaTable(manifest["target"]).history()
              if "diffcdc.version" in h]
    start = max(c.version for c in commits
                if sink_id in c.record.sinks and c.record.sinks[sink_id].manifest.get("initial"))
    with_rows = [str(c.version) for c in commits if c.version >= start
                 and c.record.sinks[sink_id].manifest.get("rows")]
    assert sorted(tagged, key=int)[-len(with_rows):] == with_rows, (tagged, with_rows)
    rows = history_rows(manifest["target"])
    check_history(rows, commits[-1].record.keys, names=names)
    for commit in commits:  # (a DataFrame's snapshot is no file: verify checks the head)
        if commit.version >= start and os.path.exists(commit.record.snapshot_path or ""):
            data = pq.read_table(commit.record.snapshot_path)
            then = as_of(rows, commit.version, names)
            # a column added later is NULL in the rows of earlier versions
            later = {c for r in then for c in r} - set(data.column_names)
            assert all(r[c] is None for r in then for c in later), commit.version
            assert canonical(then, data.column_names) == canonical(data.to_pylist()), (
                commit.version)


def _history_once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    history_once(state, sink_id)


def _kafka_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "kafka", "name": "kafka", "bootstrap_servers": servers["kafka"].bootstrap,
            "topic": _topic_of(root), "max_records_per_message": 4}


def _topic_of(root: str) -> str:
    """A topic per work folder: tests share one broker, and several name their folder "work"
    (the sink refuses a topic holding another state's messages, as it should)."""
    digest = hashlib.sha1(os.path.abspath(root).encode()).hexdigest()[:10]
    return f"contract-{os.path.basename(root)}-{digest}"


def _kafka_once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    """Every staged part of every version is in the topic exactly once (read_committed)."""
    from diffcdc.sinks.base import SinkTable
    from diffcdc.sinks.kafka.config import KafkaSinkConfig
    from diffcdc.sinks.kafka.sink import KafkaSink

    commits = state.commits()
    manifest = commits[-1].record.sinks[sink_id].manifest
    config = KafkaSinkConfig(**{k: v for k, v in _kafka_manifest_config(manifest, servers).items()})
    sink = KafkaSink(sink_id, SinkTable("T", tuple(commits[-1].record.keys)), config)
    try:
        keys = [m.key() for m in sink.clients.read_partition()]
    finally:
        sink.close()
    assert len(keys) == len(set(keys)), "a message appears twice"
    expected = sum(len(c.record.sinks[sink_id].manifest["parts"]) for c in commits
                   if sink_id in c.record.sinks)
    assert len(keys) == expected, (len(keys), expected)


def _kafka_manifest_config(manifest: dict[str, Any], servers: dict[str, Any]) -> dict[str, Any]:
    return {"type": "kafka", "bootstrap_servers": servers["kafka"].bootstrap,
            "topic": manifest["topic"]}


def _landing_tamper(storage: Any, manifest: dict[str, Any], how: str) -> None:
    """A foreign file under the next sequence number, or the table folder deleted."""
    folder = manifest["landing_folder"]
    if how == "gone":
        storage.delete_tree(folder)
        return
    import tempfile

    from diffcdc.sinks.openmirroring.landing import put_staged

    with tempfile.NamedTemporaryFile(suffix=".parquet") as foreign:
        foreign.write(b"another publisher's file")
        foreign.flush()
        put_staged(storage, foreign.name, f"{folder}/{manifest['sequence']['next']:020d}.parquet")


def _local_tamper(state: TableState, sink_id: str, servers: dict[str, Any], how: str) -> None:
    from diffcdc.storage.local import LocalStore

    manifest = state.head().record.sinks[sink_id].manifest
    _landing_tamper(LocalStore(manifest["landing"]), manifest, how)


def _dfs_tamper(state: TableState, sink_id: str, servers: dict[str, Any], how: str) -> None:
    from diffcdc.sinks.openmirroring.landing import open_landing

    manifest = state.head().record.sinks[sink_id].manifest
    storage = open_landing(manifest["landing"], account_key=servers["dfs"].account_key)
    try:
        _landing_tamper(storage, manifest, how)
    finally:
        storage.close()


def _delta_tamper(state: TableState, sink_id: str, servers: dict[str, Any], how: str) -> None:
    import shutil

    from deltalake import DeltaTable

    path = state.head().record.sinks[sink_id].manifest["target"]
    if how == "gone":
        shutil.rmtree(path)
    else:
        table = DeltaTable(path)
        keys = " AND ".join(f"{k} IS NOT NULL" for k in state.head().record.keys)
        table.delete(keys)  # another writer deletes every row


def _kafka_tamper(state: TableState, sink_id: str, servers: dict[str, Any], how: str) -> None:
    """The topic deleted ("gone"), or deleted and re-created with another writer's message
    ("foreign": its end offset falls below what diffcdc published)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = state.head().record.sinks[sink_id].manifest["topic"]
    admin = AdminClient({"bootstrap.servers": servers["kafka"].bootstrap})
    admin.delete_topics([topic], request_timeout=10)[topic].result(10)
    if how == "foreign":
        admin.create_topics([NewTopic(topic, 1)], request_timeout=10)[topic].result(10)
        producer = Producer({"bootstrap.servers": servers["kafka"].bootstrap})
        producer.produce(topic, b"someone else's message", partition=0)
        producer.flush(10)


#: The environment variable the PostgreSQL kinds' ``password_env`` names (the test server's
#: password: the ``servers`` fixture sets it, and CLI subprocesses inherit it).
PG_PASSWORD_ENV = "DIFFCDC_TEST_PG_PASSWORD"


def pg_schema_of(root: str) -> str:
    """A schema per work folder: tests share one server (and its tables) per process."""
    digest = hashlib.sha1(os.path.abspath(root).encode()).hexdigest()[:12]
    return f"contract_{digest}"


def _postgres_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    server = servers["postgres"]
    return {"type": "postgres", "name": "postgres", "url": server.jdbc_url, "user": server.user,
            "password_env": PG_PASSWORD_ENV, "schema": pg_schema_of(root), "table": "t"}


def _pg_connect(servers: dict[str, Any]) -> Any:
    import psycopg

    server = servers["postgres"]
    return psycopg.connect(host="127.0.0.1", port=server.port, dbname=server.database,
                           user=server.user, password=server.password, autocommit=True)


def _pg_target(state: TableState, sink_id: str) -> tuple[str, str]:
    schema, table = state.head().record.sinks[sink_id].manifest["target"].split(".", 1)
    return schema, table


def postgres_once(state: TableState, sink_id: str, servers: dict[str, Any]) -> None:
    """One bookkeeping row per version that wrote to the table since the sink's last full
    image (none twice: its primary key), the newest of the sink's incarnation; the table
    holds the row count that row records, under the oid it records."""
    from psycopg import sql

    commits = [c for c in state.commits() if sink_id in c.record.sinks]
    schema, table = _pg_target(state, sink_id)
    start = max(c.version for c in commits if c.record.sinks[sink_id].manifest.get("initial"))
    expected = [c.version for c in commits if c.version >= start and (
        c.record.sinks[sink_id].manifest.get("rows")
        or c.record.sinks[sink_id].manifest.get("initial"))]
    incarnation = commits[-1].record.sinks[sink_id].manifest["incarnation"]
    with _pg_connect(servers) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT version, incarnation, row_count, table_oid FROM {}.{} WHERE target_table = "
            "%s ORDER BY version").format(sql.Identifier(schema),
                                          sql.Identifier("_diffcdc_versions")),
            (table,)).fetchall()
        assert [r[0] for r in rows] == expected, ([r[0] for r in rows], expected)
        assert {r[1] for r in rows} == {incarnation}
        count = conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(table))).fetchone()
        oid = conn.execute("SELECT to_regclass(%s)::oid", (
            sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
            .as_string(conn),)).fetchone()
    assert count is not None and count[0] == rows[-1][2], (count, rows[-1])
    assert oid is not None and oid[0] == rows[-1][3]


def _postgres_history_entry(root: str, servers: dict[str, Any]) -> dict[str, Any]:
    return {**_postgres_entry(root, servers), "name": "postgres_history", "table": "h",
            "mode": "scd2"}


def pg_history_rows(conn: Any, target: tuple[str, str], types: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """Every row of a PostgreSQL history table; its jsonb columns as the sink's verify parses
    them (by ``types``: the Spark types of the snapshot's columns)."""
    from psycopg import sql

    from diffcdc.sinks.postgres.replay import parse

    name = sql.SQL("{}.{}").format(sql.Identifier(target[0]), sql.Identifier(target[1]))
    kinds = dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
        "to_regclass(%s) AND attnum > 0 AND NOT attisdropped", (name.as_string(conn),)).fetchall())
    select = sql.SQL(", ").join(
        sql.SQL("{}::text AS {}").format(sql.Identifier(c), sql.Identifier(c))
        if kind == "jsonb" else sql.Identifier(c) for c, kind in kinds.items())
    with conn.cursor(binary=True) as cursor:
        cursor.execute(sql.SQL("SELECT {} FROM {}").format(select, name))
        columns = [d.name for d in cursor.description]
        rows = [dict(zip(columns, r)) for r in cursor.fetchall()]
    for row in rows:
        for c, kind in kinds.items():
            if kind == "jsonb":
                row[c] = parse(row[c], types.get(c))
    return rows


def _as_written(data: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A snapshot's rows with its nested values as the PostgreSQL sink writes and verify
    parses them, and the Spark types of its columns."""
    from pyspark.sql.pandas.types import from_arrow_type

    from diffcdc.sinks.postgres.replay import parse
    from diffcdc.sinks.postgres.types import is_json, json_value

    types = {f.name: from_arrow_type(f.type) for f in data.schema}
    nested = {f.name: f.type for f in data.schema if is_json(types[f.name])}
    rows = data.to_pylist()
    for row in rows:
        for c, kind in nested.items():
            row[c] = None if row[c] is None else parse(json_value(row[c], kind), types[c])
    return rows, types


def postgres_history_once(state: TableState, sink_id: str, servers: dict[str, Any],
                          through: dict[str, Callable[[Any], Any]] | None = None) -> None:
    """The bookkeeping as :func:`postgres_once` checks it; the history's rules hold, and as of
    every version since the sink's last full image it is exactly that version's snapshot
    (``through``: per column, the function both sides are compared through: a table's
    normalizers)."""
    import pyarrow.parquet as pq

    from tests.support.history import as_of, canonical, check_history

    postgres_once(state, sink_id, servers)
    commits = [c for c in state.commits() if sink_id in c.record.sinks]
    start = max(c.version for c in commits if c.record.sinks[sink_id].manifest.get("initial"))
    snapshots = {c.version: pq.read_table(c.record.snapshot_path) for c in commits
                 if c.version >= start and os.path.exists(c.record.snapshot_path or "")}
    types: dict[str, Any] = {}
    written = {}
    for version, data in snapshots.items():
        written[version], more = _as_written(data)
        types.update(more)
    with _pg_connect(servers) as conn:
        rows = pg_history_rows(conn, _pg_target(state, sink_id), types)
    check_history(rows, commits[-1].record.keys)
    def clean(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{c: through[c](v) if through and c in through else v for c, v in r.items()}
                for r in items]

    for version, data in snapshots.items():
        then = as_of(rows, version)
        later = {c for r in then for c in r} - set(data.column_names)
        assert all(r[c] is None for r in then for c in later), version
        assert canonical(clean(then), data.column_names) == canonical(
            clean(written[version])), version


def pg_move_away(servers: dict[str, Any], schema: str, table: str) -> None:
    """A refused history table renamed away (the way out a refusal names)."""
    import uuid

    from psycopg import sql

    with _pg_connect(servers) as conn:
        conn.execute(sql.SQL("ALTER TABLE {}.{} RENAME TO {}").format(
            sql.Identifier(schema), sql.Identifier(table),
            sql.Identifier(f"moved_{uuid.uuid4().hex[:12]}")))


def postgres_tamper(state: TableState, sink_id: str, servers: dict[str, Any], how: str) -> None:
    """The table dropped ("gone"), or another writer deletes its rows ("foreign")."""
    from psycopg import sql

    schema, table = _pg_target(state, sink_id)
    name = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    with _pg_connect(servers) as conn:
        conn.execute(sql.SQL("DROP TABLE {}" if how == "gone" else "DELETE FROM {}").format(name))


KINDS = [
    SinkKind("landing_local", "open_mirroring", _local_entry, _local_once,
             ("publish@landing_local:1", "publish@landing_local:2"), tamper=_local_tamper),
    SinkKind("landing_dfs", "open_mirroring", _dfs_entry, _dfs_once, ("publish@landing_dfs:1",), server="dfs",
             tamper=_dfs_tamper),
    SinkKind("delta", "delta", _delta_entry, _delta_once, ("delta_committed@delta",),
             tamper=_delta_tamper),
    SinkKind("history", "delta", _history_entry, _history_once, ("delta_committed@history",),
             tamper=_delta_tamper),
    SinkKind("kafka", "kafka", _kafka_entry, _kafka_once,
             ("publish@kafka:1", "kafka_before_commit@kafka", "kafka_after_commit@kafka"),
             server="kafka", tamper=_kafka_tamper),
    SinkKind("postgres", "postgres", _postgres_entry, postgres_once,
             ("postgres_copied@postgres", "postgres_before_commit@postgres",
              "postgres_committed@postgres"), server="postgres", tamper=postgres_tamper),
    SinkKind("postgres_history", "postgres", _postgres_history_entry, postgres_history_once,
             ("postgres_before_commit@postgres_history",), server="postgres",
             tamper=postgres_tamper),
]
