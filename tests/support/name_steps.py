"""Snapshots of awkward names and types run one at a time through a sink kind: each step is
either exact in the sink (verify replays it, the sink's own once-check holds, the landing
``_metadata.json`` names the snapshot's key spelling) or refused in one line before anything
is published (the state's head and the target stay as they were).

Used by the names/types tests (tests/test_edges_names.py) and their property tests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from diffcdc.config import TableConfig
from diffcdc.engine.run import RunOptions, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import DiffcdcError
from diffcdc.state.store import TableState
from tests.support.sink_kinds import SinkKind
from tests.support.workspace import PERMISSIVE


@dataclass
class Step:
    """What one snapshot did: ``refused`` holds the error (None: it was committed)."""

    sid: str
    refused: DiffcdcError | None
    counts: tuple[int, int, int] | None = None  # inserted, updated, deleted
    #: Refused by the sink after the version was committed (it stays unpublished).
    committed: bool = False


def names_table(root: str, kind: SinkKind | Sequence[SinkKind], servers: dict[str, Any],
                keys: Sequence[str], **settings: Any) -> TableConfig:
    """Table ``T`` with a sink of ``kind`` (or of each kind), its snapshots under
    ``root/source``."""
    kinds = [kind] if isinstance(kind, SinkKind) else list(kind)
    os.makedirs(os.path.join(root, "source"), exist_ok=True)
    return TableConfig(name="T", source=os.path.join(root, "source"), keys=list(keys),
                       sinks=[k.entry(root, servers) for k in kinds], **settings)


def _target_fingerprint(root: str) -> dict[str, tuple[int, int]]:
    """Every file a sink of the table can write under ``root`` (landing, lake): size, mtime."""
    found = {}
    for top in ("landing", "lake"):
        for folder, _dirs, files in os.walk(os.path.join(root, top)):
            for name in files:
                full = os.path.join(folder, name)
                info = os.stat(full)
                found[full] = (info.st_size, info.st_mtime_ns)
    return found


def run_step(spark, servers: dict[str, Any], kind: SinkKind | Sequence[SinkKind],
             table: TableConfig, root: str, sid: str, data: pa.Table) -> Step:
    """Write ``data`` as snapshot ``sid``, run the table, and check the outcome: exact, or
    refused in one line with nothing published (before the commit, or by the sink after it)."""
    state_root = os.path.join(root, "state")
    state = TableState(state_root, "T")
    head_before = state.head()
    files_before = _target_fingerprint(root)
    path = os.path.join(table.source, sid)
    pq.write_table(data, path)
    try:
        report = run_table(spark, table, state_root, RunOptions(quality=PERMISSIVE))
    except DiffcdcError as exc:
        text = str(exc)
        # one line naming the table, with the way out
        assert text.startswith("table T") and " — " in text, text
        head = state.head()
        files_after = _target_fingerprint(root)
        if (head.version if head else None) == (head_before.version if head_before else None):
            assert files_after == files_before, text  # nothing published
            assert exc.exit_code in (2, 3), text  # refused up front: input (3) or config (2)
            os.remove(path)  # the operator takes the refused extract back
            return Step(sid, exc)
        # committed, a sink refused to publish it (its target cannot take it): it stays
        # unpublished, its targets untouched, until the operator acts; the others published it
        assert head.unpublished and all(s in text for s in head.unpublished), text
        for sink in table.sinks:
            if sink.sink_id in head.unpublished:
                for target in (getattr(sink, "path", None), getattr(sink, "changelog_path", None)):
                    if target:
                        assert {f: v for f, v in files_after.items() if f.startswith(target)} == {
                            f: v for f, v in files_before.items() if f.startswith(target)}, text
        return Step(sid, exc, committed=True)
    (result,) = report.snapshots or (None,)
    check_exact(spark, servers, kind, table, root, path)
    if result is None:  # only a backlog published
        return Step(sid, None)
    return Step(sid, None, (result.inserted, result.updated, result.deleted))


def check_exact(spark, servers: dict[str, Any], kind: SinkKind | Sequence[SinkKind],
                table: TableConfig, root: str, path: str) -> None:
    """Each sink replays the snapshot at ``path``, holds each change once, and (a landing
    zone) names the keys as the snapshot spells them."""
    kinds = [kind] if isinstance(kind, SinkKind) else list(kind)
    state = TableState(os.path.join(root, "state"), "T")
    results = verify_table(spark, table, os.path.join(root, "state"), path)
    bad = {k: r.to_dict() for k, r in results.items() if not r.identical}
    assert not bad, bad
    spelled = [f.name for f in pq.read_schema(path)]
    keys = state.head().record.keys
    assert all(k in spelled for k in keys), (keys, spelled)
    for one, sink in zip(kinds, table.sinks):
        one.assert_once(state, sink.sink_id, servers)
        if one.name == "landing_local":
            manifest = state.head().record.sinks[sink.sink_id].manifest
            meta = os.path.join(manifest["landing"], manifest["landing_folder"],
                                "_metadata.json")
            with open(meta, encoding="utf-8") as handle:
                assert json.load(handle)["keyColumns"] == keys
