"""The sink contract's shared parts: the contract table over chosen sink kinds, its snapshots,
and the checks every contract test ends with (each sink replays the snapshot; nothing in any
sink was applied twice)."""

from __future__ import annotations

import os
from typing import Any

from diffcdc.config import StateCompaction, TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.state.store import TableState
from tests.support.sink_kinds import KINDS, SinkKind
from tests.support.workspace import PERMISSIVE

KEYS = ("k1", "k2")

#: Random sequences cross compaction: a base, up to two deltas on it, a base again (sooner
#: when the deltas pass half the rows).
CONTRACT_COMPACTION = StateCompaction(max_deltas=2)


def table_config(root: str, kinds: list[SinkKind], servers: dict[str, Any],
                 compaction: StateCompaction = CONTRACT_COMPACTION) -> TableConfig:
    """Table T keyed by ``KEYS``, its source under ``root/source``, one sink per kind."""
    return TableConfig(
        name="T", source=os.path.join(root, "source"), keys=list(KEYS),
        sinks=[kind.entry(root, servers) for kind in kinds], state_compaction=compaction,
    )


def assert_replays(spark, table: TableConfig, state: str, snapshot: str) -> None:
    """Every sink of ``table`` replays to ``snapshot`` (a path, or an id in the table's source)."""
    path = snapshot if os.path.isabs(snapshot) else os.path.join(table.source, snapshot)
    results = verify_table(spark, table, state, path)
    bad = {k: r.to_dict() for k, r in results.items() if not r.identical}
    assert len(results) == len(table.sinks) and not bad, bad


def assert_once(table: TableConfig, state: str, servers: dict[str, Any],
                kinds: list[SinkKind] | None = None) -> None:
    """Each sink's own check: nothing was applied twice (``kinds`` in the order of the sinks)."""
    tstate = TableState(state, table.name)
    for kind, sink in zip(kinds or KINDS, table.sinks):
        kind.assert_once(tstate, sink.sink_id, servers)


def companion(kind: SinkKind) -> SinkKind:
    """Another sink of the same table, to show it goes on while ``kind`` is refused."""
    return next(k for k in KINDS if k.name == ("delta" if kind.name != "delta" else "landing_local"))


def write_rows(root: str, sid: str, n: int, tag: str) -> None:
    """Snapshot ``sid`` of ``n`` rows (k1, k2, v, n) under ``root/source``, values tagged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"k1": i % 3, "k2": f"k{i}", "v": f"{tag}{i}", "n": None if i % 4 else i}
            for i in range(n)]
    schema = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.string()),
                        ("n", pa.int64())])
    os.makedirs(os.path.join(root, "source"), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema), os.path.join(root, "source", sid))


def two_versions_published(spark, servers: dict[str, Any], kind: SinkKind, root: str
                           ) -> tuple[TableConfig, str, str, str]:
    """Table T with a ``kind`` sink and its companion, two versions run and published:
    (table, the sink's id, the companion's id, the state root)."""
    table = table_config(root, [kind, companion(kind)], servers)
    sink_id, other_id = (s.sink_id for s in table.sinks)
    state = os.path.join(root, "state")
    for n, (rows, tag) in enumerate([(12, "a"), (14, "b")], start=1):
        write_rows(root, f"{n}.parquet", rows, tag)
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    return table, sink_id, other_id, state
