"""The run lease, on a local folder and on a mount without
``link()``/``flock`` (both disabled, as on FUSE mounts). No Spark here."""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys

import pytest

from diffcdc.errors import ConcurrentRunError
from diffcdc.state.lease import LEASE_PATH, Lease, LeaseHolder
from diffcdc.state.store import TableState
from diffcdc.storage.local import LocalStore
from tests.support import nolink
from tests.support.concurrency import Clock, race


@pytest.fixture(params=["local", "nolink"])
def root(request, tmp_path, monkeypatch):
    """A state root; ``nolink``: os.link into it and fcntl.flock fail with ENOTSUP."""
    if request.param == "nolink":
        nolink.disable(str(tmp_path), monkeypatch.setattr)
        with pytest.raises(OSError):
            os.link(__file__, str(tmp_path / "x"))
    return str(tmp_path)




def test_a_live_lease_refuses_a_second_run_naming_the_holder(root):
    clock = Clock()
    first = Lease(LocalStore(root, reservations=True), "T", "run-1", 60, clock)
    first.acquire()
    clock.now += 59
    with pytest.raises(ConcurrentRunError) as refused:
        Lease(LocalStore(root, reservations=True), "T", "run-2", 60, clock).acquire()
    message = str(refused.value)
    assert "table T" in message and "run run-1" in message and f"pid {os.getpid()}" in message
    assert "\n" not in message
    first.release()
    assert LocalStore(root, reservations=True).read(LEASE_PATH) is None
    Lease(LocalStore(root, reservations=True), "T", "run-2", 60, clock).acquire()


def test_an_expired_lease_is_taken_over_once_with_a_warning(root, caplog):
    clock = Clock()
    Lease(LocalStore(root, reservations=True), "T", "crashed", 60, clock).acquire()  # never released
    clock.now += 61
    takers = [Lease(LocalStore(root, reservations=True), "T", f"taker-{i}", 60, clock) for i in range(6)]
    with caplog.at_level(logging.WARNING, logger="diffcdc.state.lease"):
        results = race(lambda i: takers[i].acquire(), n=6)
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, ConcurrentRunError) for r in results if r is not None)
    holder = LeaseHolder.parse(LocalStore(root, reservations=True).read_bytes(LEASE_PATH))
    assert holder.run_id == f"taker-{winners[0]}"
    warnings = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert len(warnings) == 1 and "run crashed" in warnings[0] and "expired at" in warnings[0]


def test_a_killed_holder_on_this_machine_is_taken_over_at_once(root, caplog):
    code = (
        "import sys; from diffcdc.state.lease import Lease;"
        "from diffcdc.storage.local import LocalStore;"
        "Lease(LocalStore(sys.argv[1], reservations=True), 'T', 'killed', 3600).acquire()"
    )
    subprocess.run([sys.executable, "-c", code, root], check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    with caplog.at_level(logging.WARNING, logger="diffcdc.state.lease"):
        Lease(LocalStore(root, reservations=True), "T", "next", 3600).acquire()
    assert any("run killed" in r.getMessage() and "no longer running" in r.getMessage() for r in caplog.records)


def test_the_heartbeat_renews_and_a_lost_lease_commits_nothing(root):
    clock = Clock()
    storage = LocalStore(root, reservations=True)
    lease = Lease(storage, "T", "run-1", 60, clock)
    lease.acquire()
    clock.now += 40
    assert lease.renew()
    assert LeaseHolder.parse(storage.read_bytes(LEASE_PATH)).expires == clock.now + 60
    clock.now += 59
    lease.check()  # renewed: still ours
    clock.now += 2  # heartbeat missed: expired
    with pytest.raises(ConcurrentRunError, match="lost the table's lease"):
        lease.check()
    taker = Lease(storage, "T", "run-2", 60, clock)
    taker.acquire()
    assert not lease.renew()
    lease.release()  # not ours any more: left alone
    assert LeaseHolder.parse(storage.read_bytes(LEASE_PATH)).run_id == "run-2"


def test_heartbeat_thread_keeps_a_short_lease_alive(root):
    import time

    lease = Lease(LocalStore(root, reservations=True), "T", "run-1", 0.4)
    lease.acquire()
    lease.start_heartbeat()
    time.sleep(1.0)  # 2.5 lease times
    lease.check()
    with pytest.raises(ConcurrentRunError, match="run run-1"):
        Lease(LocalStore(root, reservations=True), "T", "run-2", 0.4).acquire()
    lease.release()
    assert LocalStore(root, reservations=True).read(LEASE_PATH) is None


# -- the table's state -------------------------------------------------------------------------


def test_lock_removes_an_abandoned_reservation(root):
    state = TableState(root, "T")
    os.makedirs(state.storage.describe("log"))
    open(os.path.join(state.storage.describe("log"), f"{1:020d}.json"), "wb").close()
    assert state.commits() == [] and not state.has_history()
    with state.lock("r"):
        assert os.listdir(state.storage.describe("log")) == []


def test_legacy_lock_file_is_still_honoured(tmp_path):
    """State of diffcdc before leases has ``.lock``; an old diffcdc holding it is refused."""
    state = TableState(str(tmp_path), "T")
    os.makedirs(state.dir)
    with open(os.path.join(state.dir, ".lock"), "a+") as old:
        with state.lock("r"):
            pass  # nobody holds it: fine
        fcntl.flock(old.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ConcurrentRunError, match="before run leases"):
            with state.lock("r2"):
                pass
    assert not os.path.exists(os.path.join(state.dir, LEASE_PATH))


def test_legacy_lock_file_on_a_mount_without_flock(tmp_path, monkeypatch):
    nolink.disable(str(tmp_path), monkeypatch.setattr)
    state = TableState(str(tmp_path), "T")
    os.makedirs(state.dir)
    open(os.path.join(state.dir, ".lock"), "a").close()
    with state.lock("r"):
        with pytest.raises(ConcurrentRunError, match="run r "):
            with TableState(str(tmp_path), "T").lock("r2"):
                pass


def test_a_run_frozen_past_its_lease_is_told_so_not_to_reload_the_table(spark, tmp_path,
                                                                         monkeypatch):
    """A run frozen (SIGSTOP, a stalled VM) past its lease finds the other run's landing file:
    the error is the lost lease and that nothing more was published, not 'a file this engine
    never wrote ... re-create the table' (a destructive hint for a lost lease)."""
    import time

    from diffcdc.sinks.openmirroring.sink import OpenMirroringSink
    from diffcdc.state.lease import Lease as RunLease
    from tests.support.workspace import Workspace

    ws = Workspace(str(tmp_path))
    ws.write("1.parquet", [{"id": 1, "v": "a"}])
    ws.run(spark)
    files = ws.data_files()
    ws.write("2.parquet", [{"id": 1, "v": "b"}])
    real = OpenMirroringSink.check

    def frozen_then_check(self, history):
        time.sleep(1.2)  # frozen past the lease: another run takes the table and publishes
        RunLease(LocalStore(os.path.join(ws.state, "T"), reservations=True), "T", "other", 60).acquire()
        with open(os.path.join(ws.folder, "00000000000000000002.parquet"), "wb") as handle:
            handle.write(b"the other run's file")
        return real(self, history)

    monkeypatch.setattr(RunLease, "start_heartbeat", lambda self: None)
    monkeypatch.setattr(OpenMirroringSink, "check", frozen_then_check)
    with pytest.raises(ConcurrentRunError, match="lost the table's lease") as lost:
        ws.run(spark, lease_seconds=1)
    assert "publishes nothing more" in str(lost.value) and "reload" not in str(lost.value)
    assert TableState(ws.state, "T").head().version == 1
    assert ws.data_files() == [*files, "00000000000000000002.parquet"]
