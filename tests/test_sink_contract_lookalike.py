"""The sink contract's class "foreign look-alike target" (issue 38): a target deleted and made
again by someone else so that it looks like the sink's own where a cheap check looks — a Kafka
topic re-created and refilled past every offset diffcdc published, a landing table folder
re-created with files under the names diffcdc wrote (and its ``_metadata.json``), a Delta table
(current image or history) deleted and made again with one commit for each of its commits,
carrying diffcdc's commit info and application transactions and the same schema and
properties. The sink is refused alone, again on the next run, the table's other sink goes on,
and ``reload --sink`` gives the target a full image that replays.

The kind without a look-alike here: ``landing_dfs`` (the same check as ``landing_local``
through another byte store).
"""

from __future__ import annotations

import os

import pytest

from diffcdc.engine.run import RunOptions, RunRequest, run_table
from diffcdc.engine.verify import verify_table
from diffcdc.errors import PublishConflict, TargetMismatch
from diffcdc.state.store import TableState
from tests.support.contract import (
    assert_replays,
    two_versions_published,
    write_rows,
)
from tests.support.lookalikes import LOOKALIKES
from tests.support.sink_kinds import KINDS
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", [k for k in KINDS if k.name in LOOKALIKES], ids=lambda k: k.name)
def test_a_foreign_lookalike_target_is_refused_alone_and_reload_sink_replays_it(
        spark, servers, kind, tmp_path):
    root = str(tmp_path)
    table, sink_id, other_id, state = two_versions_published(spark, servers, kind, root)
    LOOKALIKES[kind.name](TableState(state, "T"), sink_id, servers)
    write_rows(root, "3.parquet", 13, "c")
    for _ in range(2):  # refused again by the next run: nothing resolves it silently
        with pytest.raises((TargetMismatch, PublishConflict), match=f"sink {sink_id}") as refused:
            run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
        assert "\n" not in str(refused.value)
        assert f"diffcdc reload --table T --sink {sink_id} --yes" in str(refused.value)
    assert TableState(state, "T").head().unpublished == [sink_id]
    results = verify_table(spark, table, state, os.path.join(table.source, "3.parquet"),
                           only=other_id)
    assert results[other_id].identical, results[other_id].to_dict()
    report = run_table(spark, table, state, RunOptions(
        quality=PERMISSIVE, request=RunRequest(reload=True, reload_sinks=(sink_id,))))
    assert report.outcome == "ok" and report.snapshots[0].sinks[other_id]["rows"] == 0
    assert_replays(spark, table, state, "3.parquet")
    write_rows(root, "4.parquet", 11, "d")
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    assert_replays(spark, table, state, "4.parquet")
