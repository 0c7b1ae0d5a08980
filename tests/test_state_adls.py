"""State documents (commit log, marks, lease, reports) on an ADLS Gen2 / OneLake URL, against the
loopback DFS server of :mod:`tests.support.dfs_server` with the real ``azure-storage-file-datalake``
client: put-if-absent is ``If-None-Match: *``, a lease takeover ``If-Match: <ETag>``."""

from __future__ import annotations

import logging

import pytest

from diffcdc.errors import ConcurrentRunError
from diffcdc.state.lease import LEASE_PATH, Lease, LeaseHolder
from diffcdc.state.requests import reload_wanted
from diffcdc.state.store import TableState
from diffcdc.storage.base import ByteStore
from diffcdc.storage.registry import open_store
from tests.support.concurrency import Clock, race
from tests.support.dfs_server import DfsServer

pytestmark = pytest.mark.integration

FAST = {"retry_backoff": 0.01, "retry_backoff_max": 0.05}


def open_storage(server: DfsServer) -> ByteStore:
    return open_store(server.url("ws", "lake/state"), account_key=server.account_key, **FAST).at("T")


def test_lease_on_adls_refuses_a_live_run_and_takes_over_an_expired_one(server, caplog):
    clock = Clock()
    Lease(open_storage(server), "T", "crashed", 60, clock).acquire()  # never released
    with pytest.raises(ConcurrentRunError, match="run crashed"):
        Lease(open_storage(server), "T", "second", 60, clock).acquire()
    clock.now += 61
    takers = [Lease(open_storage(server), "T", f"taker-{i}", 60, clock) for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="diffcdc.state.lease"):
        results = race(lambda i: takers[i].acquire(), n=4)
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert LeaseHolder.parse(open_storage(server).read_bytes(LEASE_PATH)).run_id == f"taker-{winners[0]}"
    assert sum("took over the run lease of run crashed" in r.getMessage() for r in caplog.records) == 1
    takers[winners[0]].release()
    assert open_storage(server).read(LEASE_PATH) is None


def test_table_state_keeps_requests_marks_and_reports_on_adls(server, tmp_path):
    state = TableState(str(tmp_path), "T", storage=open_storage(server))
    with state.lock("run-1", 30):
        assert server.names("ws", "lake/state/T") == [LEASE_PATH]
        request = reload_wanted(None, "because")
        state.requests.save_reload(request)
        assert state.requests.pending_reload() == request and state.has_history()
        state.mark_published(1, "lake", {"files": 2})
        state.mark_published(1, "lake", {"files": 3})  # written once: the first stays
        state.sink_marks("lake").put(1, "dropped")
        assert state.sink_marks("lake").has(1, "dropped")
        state.reports.save({"run_id": "run-1", "snapshots": [{"id": "a"}]})
        state.reports.save_idle({"run_id": "run-2"})
    assert state.reports.last() == {"run_id": "run-2"}
    assert state.reports.last_change() == {"run_id": "run-1", "snapshots": [{"id": "a"}]}
    assert state.read_document("log/00000000000000000001.published.lake.json")["files"] == 2
    assert sorted(server.names("ws", "lake/state/T")) == [
        "last_change.json", "last_report.json", "log", "reload.json", "reports"
    ]  # the lease is gone
    assert state.commits() == []  # marks are not commits
