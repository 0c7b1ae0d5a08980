"""Exactly once: a run killed at any step boundary (or mid-publish) is finished by the next run.

The crashing run is a real ``diffcdc run`` process that dies with ``os._exit`` at the named
point (as with ``kill -9``: no cleanup). The rerun happens in process; afterwards the landing
files replayed in order must give exactly the latest snapshot, every file must be the one its
commit record names (no name reused with different content), and a further run is a no-op.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest

from diffcdc.state.store import TableState
from tests.support import nolink
from tests.support.workspace import Workspace

# Every crash point with every sink is killed in tests/test_sink_contract.py; here the CLI
# process itself, with several landing files per batch, around the commit and mid-publish.
POINTS = [
    "after_changes_staged",
    "after_claim",
    "publish:3",
    "after_published",
]

FIRST = [{"id": i, "name": f"n{i}", "score": float(i)} for i in range(10)]
SECOND = (
    [{"id": i, "name": f"n{i}", "score": float(i) + (1 if i < 4 else 0)} for i in range(1, 10)]
    + [{"id": 20, "name": "new", "score": None}, {"id": 21, "name": None, "score": 0.5}]
)


def cli_command(ws: Workspace, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "diffcdc.cli", "run", "--quiet",
        "--source", ws.source, "--keys", "id", "--table", ws.table.name,
        "--landing", ws.landing, "--state", ws.state, "--max-rows-per-file", "2",
        "--master", "local[1]", *extra,
    ]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(extra)
    return env


#: Where the state root is: a local folder, or a mount without link() and flock.
MOUNTS = ["local", "nolink"]


def on_mount(mount: str, ws: Workspace, monkeypatch: pytest.MonkeyPatch, **extra: str) -> dict[str, str]:
    """The subprocess environment for ``mount``; the test process gets the same mount."""
    if mount == "local":
        return cli_env(**extra)
    nolink.disable(ws.state, monkeypatch.setattr)
    return cli_env(**nolink.env_for(ws.state), **extra)


def assert_published_exactly_once(ws: Workspace) -> None:
    state = TableState(ws.state, ws.table.name)
    commits = state.commits()
    expected = {
        f["name"]: f["sha256"]
        for c in commits
        for f in c.record.sinks["open_mirroring"].manifest["files"]
    }
    assert all(c.published for c in commits)
    assert ws.data_files() == sorted(expected)  # consecutive, nothing twice, nothing extra
    for name, digest in expected.items():
        with open(os.path.join(ws.folder, name), "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == digest
    names = sorted(expected)
    assert names == [f"{n:020d}.parquet" for n in range(1, len(names) + 1)]
    leftovers = [n for n in os.listdir(ws.folder) if n.startswith("_") and n != "_metadata.json"]
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "mount"),
    [(p, "local") for p in POINTS] + [("after_claim", "nolink"), ("publish:3", "nolink")],
)
def test_crash_at_any_point_then_rerun(spark, tmp_path, monkeypatch, point, mount):
    ws = Workspace(str(tmp_path), table="T", keys=("id",), max_rows_per_file=2)
    env = on_mount(mount, ws, monkeypatch, DIFFCDC_CRASH_AT=point)
    ws.write("2026-11-20.parquet", FIRST)
    ws.run(spark)
    ws.write("2026-11-21.parquet", SECOND)
    crashed = subprocess.run(cli_command(ws), env=env, capture_output=True, text=True, timeout=300)
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    # a partial upload of ours from the dead process must not survive the next run
    with open(os.path.join(ws.folder, "_00000000000000000003.parquet.0123abcd.diffcdc-tmp"), "wb") as h:
        h.write(b"partial")
    report = ws.run(spark)
    committed_before = point not in {"after_read", "after_state_staged", "after_changes_staged"}
    assert bool(report.resumed_versions) == (committed_before and point != "after_published")
    ws.assert_mirror_equals(spark, "2026-11-21.parquet")
    assert_published_exactly_once(ws)
    assert ws.run(spark).outcome == "nothing to do"
    assert_published_exactly_once(ws)


@pytest.mark.slow
@pytest.mark.parametrize("mount", MOUNTS)
def test_two_concurrent_runs_one_wins(spark, tmp_path, monkeypatch, mount):
    ws = Workspace(str(tmp_path), table="T", keys=("id",), max_rows_per_file=2)
    env = on_mount(mount, ws, monkeypatch)
    ws.write("2026-11-20.parquet", FIRST)
    ws.write("2026-11-21.parquet", SECOND)
    procs = [
        subprocess.Popen(cli_command(ws), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 1]), outs
    if codes == [0, 1]:
        loser = outs[[p.returncode for p in procs].index(1)][1]
        assert "another diffcdc run" in loser or "committed by another run" in loser
    ws.run(spark)  # whatever the loser left undone
    ws.assert_mirror_equals(spark, "2026-11-21.parquet")
    assert_published_exactly_once(ws)


@pytest.mark.slow
@pytest.mark.parametrize("mount", MOUNTS)
def test_run_killed_with_sigkill_mid_run(spark, tmp_path, monkeypatch, mount):
    """A real kill -9 at an arbitrary moment, not at a prepared point; its lease is left behind
    and taken over at once (same machine, the process is gone)."""
    ws = Workspace(str(tmp_path), table="T", keys=("id",), max_rows_per_file=2)
    env = on_mount(mount, ws, monkeypatch)
    ws.write("2026-11-20.parquet", FIRST)
    ws.write("2026-11-21.parquet", SECOND)
    proc = subprocess.Popen(cli_command(ws), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not os.path.isdir(os.path.join(ws.state, "T", "versions")):
        time.sleep(0.05)
    time.sleep(1.0)
    proc.kill()
    proc.communicate(timeout=60)
    if proc.returncode == -9:
        assert os.path.exists(os.path.join(ws.state, "T", "lease.json"))  # the killed run's
    ws.run(spark)
    assert not os.path.exists(os.path.join(ws.state, "T", "lease.json"))
    ws.assert_mirror_equals(spark, "2026-11-21.parquet")
    assert_published_exactly_once(ws)
