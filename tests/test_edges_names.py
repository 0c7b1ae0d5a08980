"""Issue 38, names users have: dots in names, renames only in case, keys configured in another
case, and types Spark cannot hold, in every sink (both Delta modes): exact, or refused in one
line before anything is published."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.name_steps import names_table, run_step
from tests.support.sink_kinds import KINDS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_dotted_names_merge_in_every_sink(spark, servers, kind, tmp_path):
    """``order.id`` (the key) and ``the.value``: the Delta MERGE quotes its target columns."""
    root = str(tmp_path)
    table = names_table(root, kind, servers, ["order.id"])
    schema = pa.schema([("order.id", pa.int64()), ("the.value", pa.string()),
                        ("select", pa.int32())])
    snapshots = [
        [{"order.id": 1, "the.value": "a", "select": 1}, {"order.id": 2, "the.value": "b",
                                                          "select": 2}],
        [{"order.id": 1, "the.value": "a2", "select": 1}, {"order.id": 3, "the.value": None,
                                                           "select": 3}],
        [{"order.id": 1, "the.value": "a2", "select": 9}, {"order.id": 3, "the.value": "c",
                                                           "select": 3}],
    ]
    steps = [run_step(spark, servers, kind, table, root, f"{i:08d}.parquet",
                      pa.Table.from_pylist(rows, schema))
             for i, rows in enumerate(snapshots, start=1)]
    assert [s.refused for s in steps] == [None, None, None], [str(s.refused) for s in steps]
    assert [s.counts for s in steps] == [(2, 0, 0), (1, 1, 1), (0, 2, 0)]
