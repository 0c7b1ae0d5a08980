"""The sink contract's class "future snapshot time", over every sink kind (one table with a
sink of each): a snapshot whose as-of time lies far past the run's clock (a file touched into
2099) is refused before anything is committed, nothing is published in any sink, and once the
file's time is corrected the table goes on and every sink replays the snapshot."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from diffcdc.engine.run import RunOptions, run_table
from diffcdc.errors import InputRefused
from diffcdc.state.store import TableState
from tests.support.contract import assert_once, assert_replays, table_config, write_rows
from tests.support.sink_kinds import KINDS
from tests.support.workspace import PERMISSIVE

pytestmark = pytest.mark.slow
FUTURE = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc).timestamp()


def test_a_snapshot_time_far_in_the_future_is_refused_and_the_table_goes_on_once_fixed(
        spark, servers, tmp_path):
    root = str(tmp_path)
    table = table_config(root, KINDS, servers)
    state = os.path.join(root, "state")
    write_rows(root, "1.parquet", 12, "a")
    run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    write_rows(root, "2.parquet", 14, "b")
    future = os.path.join(root, "source", "2.parquet")
    os.utime(future, (FUTURE, FUTURE))
    with pytest.raises(InputRefused, match="past the run's clock") as refused:
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
    message = str(refused.value)
    assert refused.value.exit_code == 3 and "\n" not in message and "2.parquet" in message
    head = TableState(state, "T").head()
    assert head.version == 1 and head.unpublished == []
    assert_replays(spark, table, state, "1.parquet")  # nothing of snapshot 2 published
    os.utime(future, (time.time(), time.time()))
    assert run_table(spark, table, state, RunOptions(quality=PERMISSIVE)).outcome == "ok"
    assert_replays(spark, table, state, "2.parquet")
    assert_once(table, state, servers)
