"""Issue 38, a Spark Connect server that dies mid-run: a lost (killed) or hung (stopped)
server ends the run within ``connect_timeout`` in one line, releasing the table's lease, and
the rerun against a restarted server is exact; ``--remote`` without the connect extra names
the extra to install.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.snapshots import snapshot_one, write_snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A client whose Python cannot import the gRPC client's packages (the connect extra).
WITHOUT_GRPC = """import sys
sys.modules["grpc"] = None  # `import grpc` raises ImportError, as where it is not installed
from diffcdc.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a subprocess (no Spark, no server)
def test_remote_without_the_connect_extra_names_the_extra(tmp_path):
    root = str(tmp_path)
    write_snapshot(os.path.join(root, "source"), "1.parquet", snapshot_one(3), seed=0)
    (tmp_path / "client.py").write_text(WITHOUT_GRPC)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run(
        [sys.executable, "client.py", "run", "--source", "source", "--keys", "k1,k2",
         "--table", "T", "--landing", "landing", "--state", "state",
         "--remote", "sc://127.0.0.1:15002"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, done.stderr
    assert "pip install 'diffcdc[connect]'" in lines[0], lines[0]
    assert "grpcio" in lines[0] and "give it as sc://host:port" not in lines[0], lines[0]
    assert not os.path.exists(os.path.join(root, "landing"))
    assert not os.path.exists(os.path.join(root, "state", "T"))


TIMEOUT = 8.0  # connect_timeout of the runs below: a lost server ends a run in seconds


def _cli(cwd: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``diffcdc ARGS`` in a client process without Java, started (not waited for)."""
    from tests.support.connect_server import client_env

    return subprocess.Popen([sys.executable, "-m", "diffcdc.cli", *args], cwd=cwd,
                            env=client_env(cwd, **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _ended(process: subprocess.Popen[str], within: float) -> tuple[int, str]:
    """The exit code and stderr of a process that must end ``within`` seconds (no stuck
    thread keeps it alive)."""
    try:
        _, err = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        _, err = process.communicate()
        raise AssertionError(f"the run did not end within {within:.0f} s:\n{err[-3000:]}") \
            from None
    return process.returncode, err


def _paused_run(root: str, config: str, at: str = "after_read",
                *more: str) -> tuple[subprocess.Popen[str], str]:
    """A run paused at ``at``: by default once its snapshot is read (the table's lease held,
    nothing computed)."""
    pause = os.path.join(root, f"paused-{len(os.listdir(root))}")
    run = _cli(root, "run", "--quiet", "--config", config, *more,
               env={"DIFFCDC_PAUSE_AT": at, "DIFFCDC_PAUSE_FILE": pause})
    import time

    deadline = time.monotonic() + 240
    while not os.path.exists(pause):
        assert run.poll() is None, run.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never reached its snapshot"
        time.sleep(0.1)
    return run, pause


def _assert_lost_run(run: subprocess.Popen[str], url: str, why: str, state: str,
                     out: str = "nothing was published for T") -> None:
    import time

    started = time.monotonic()
    code, err = _ended(run, within=TIMEOUT + 60)
    took = time.monotonic() - started
    assert code == 1, err[-3000:]
    lines = [line for line in err.splitlines() if "stopped answering" in line]
    assert len(lines) == 1, err[-3000:]
    assert f"the Spark Connect server {url} stopped answering ({why}" in lines[0], lines[0]
    assert out in lines[0] and "run again when it is back" in lines[0], lines[0]
    assert "Traceback" not in err and "_InactiveRpcError" not in err, err[-3000:]
    assert took < TIMEOUT + 45, f"the run took {took:.0f} s to give up"
    assert not os.path.exists(os.path.join(state, "T", "lease.json")), "the lease was kept"


@pytest.mark.slow
@pytest.mark.connect
def test_a_connect_server_killed_or_hung_mid_run_ends_the_run_and_the_rerun_is_exact(
        spark, servers, tmp_path):
    from diffcdc.config import TableConfig
    from diffcdc.state.store import TableState
    from tests.support.config_text import table_toml
    from tests.support.connect_server import ConnectServer
    from tests.support.contract import assert_once, assert_replays
    from tests.support.sink_kinds import KINDS
    from tests.support.snapshots import snapshot_two

    root = str(tmp_path / "work")
    os.makedirs(root)
    server = ConnectServer(str(tmp_path / "server"))
    server.start()
    try:
        table = TableConfig(name="T", source=os.path.join(root, "source"), keys=["k1", "k2"],
                            sinks=[kind.entry(root, servers) for kind in KINDS])
        state = os.path.join(root, "state")
        config = os.path.join(root, "diffcdc.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(table_toml(table, state, spark={"remote": server.url,
                                                    "connect_timeout": TIMEOUT}))
        write_snapshot(table.source, "1.parquet", snapshot_one(), seed=0)
        code, err = _ended(_cli(root, "run", "--quiet", "--config", config), within=300)
        assert code == 0, err[-3000:]
        assert_replays(spark, table, state, os.path.join(table.source, "1.parquet"))

        # killed (kill -9) while the run holds the table's lease
        write_snapshot(table.source, "2.parquet", snapshot_two(), seed=1)
        run, pause = _paused_run(root, config)
        server.kill()
        os.remove(pause)
        _assert_lost_run(run, server.url, "connection refused", state)
        assert [c.version for c in TableState(state, "T").commits()] == [1]
        assert_replays(spark, table, state, os.path.join(table.source, "1.parquet"))

        server.start()  # on the same port: the config's URL
        code, err = _ended(_cli(root, "run", "--quiet", "--config", config), within=300)
        assert code == 0, err[-3000:]
        assert_replays(spark, table, state, os.path.join(table.source, "2.parquet"))
        assert_once(table, state, servers)

        # hung (SIGSTOP): its sockets stay open, nothing answers
        write_snapshot(table.source, "3.parquet", snapshot_one(7), seed=2)
        run, pause = _paused_run(root, config)
        server.pause()
        os.remove(pause)
        try:
            _assert_lost_run(run, server.url, "no answer", state)
        finally:
            server.resume()
        assert [c.version for c in TableState(state, "T").commits()] == [1, 2]
        assert_replays(spark, table, state, os.path.join(table.source, "2.parquet"))

        code, err = _ended(_cli(root, "run", "--quiet", "--config", config), within=300)
        assert code == 0, err[-3000:]
        assert_replays(spark, table, state, os.path.join(table.source, "3.parquet"))
        assert_once(table, state, servers)

        # killed once the version is committed, before its sinks publish: publishing needs no
        # Spark (staged files, delta-rs, the Kafka producer), so the run ends exact, exit 0,
        # and promptly, however long connect_timeout is: nothing at exit (the client's release
        # of its session) waits for the dead server
        write_snapshot(table.source, "4.parquet", snapshot_two(), seed=3)
        run, pause = _paused_run(root, config, "after_claim", "--connect-timeout", "600")
        server.kill()
        os.remove(pause)
        import time

        started = time.monotonic()
        code, err = _ended(run, within=120)
        assert code == 0, err[-3000:]
        assert time.monotonic() - started < 90
        assert [c.version for c in TableState(state, "T").commits()] == [1, 2, 3, 4]
        assert_replays(spark, table, state, os.path.join(table.source, "4.parquet"))
        assert_once(table, state, servers)
    finally:
        server.stop()


# -- the watch and the retries, without Spark: a port that refuses, a socket that never answers


class _Session:
    """What :class:`diffcdc.spark.connect.ConnectWatch` uses of a Spark Connect session: its client's
    channel builder, channel and ``close``."""

    def __init__(self, target: str) -> None:
        import grpc

        self.target = target
        self.closed = False
        outer = self

        class Builder:
            def toChannel(self):  # noqa: N802 - pyspark's name
                return grpc.insecure_channel(outer.target)

        class Client:
            _builder = Builder()
            _channel = grpc.insecure_channel(target)

            def close(self) -> None:
                self._channel.close()
                outer.closed = True

        self.client = Client()


def _silent_socket():
    """A listening socket that never accepts: the kernel completes connections, nothing ever
    answers (a stopped server)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def _watched(session: _Session, timeout: float):
    from diffcdc.spark.connect import ConnectWatch

    watch = ConnectWatch(session, session.target, timeout)  # type: ignore[arg-type]
    watch.start()
    return watch


def test_a_hung_server_is_lost_after_the_timeout_and_a_call_in_flight_ends_at_once():
    import threading
    import time

    import grpc

    from diffcdc.spark.connect import connect_lost

    sock = _silent_socket()
    try:
        session = _Session(f"127.0.0.1:{sock.getsockname()[1]}")
        failed: list[BaseException] = []

        def in_flight() -> None:  # a call with no deadline, as a long job's stream is
            call = session.client._channel.unary_unary("/spark.connect.Svc/Execute")
            try:
                call(b"", wait_for_ready=True)
            except grpc.RpcError as exc:
                failed.append(exc)

        caller = threading.Thread(target=in_flight, daemon=True)
        caller.start()
        started = time.monotonic()
        watch = _watched(session, timeout=2.0)
        caller.join(30)
        took = time.monotonic() - started
        assert not caller.is_alive(), "the call in flight never ended"
        assert failed and failed[0].code() == grpc.StatusCode.CANCELLED, failed
        assert 2.0 <= took < 15, took
        assert watch.lost is not None and watch.lost.startswith("no answer, for "), watch.lost
        deadline = time.monotonic() + 10
        while not session.closed and time.monotonic() < deadline:  # closed after the channel
            time.sleep(0.05)
        assert session.closed
        assert connect_lost(session, None) == watch.lost  # type: ignore[arg-type]
    finally:
        sock.close()


def test_a_killed_server_is_lost_as_refused_and_a_live_one_is_kept():
    import time

    import grpc

    from tests.support.kafka_broker import free_port

    session = _Session(f"127.0.0.1:{free_port()}")  # nothing listens: refused
    watch = _watched(session, timeout=1.0)
    deadline = time.monotonic() + 15
    while watch.lost is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watch.lost is not None and watch.lost.startswith("connection refused"), watch.lost

    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))  # answers UNIMPLEMENTED
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        live = _Session(f"127.0.0.1:{port}")
        kept = _watched(live, timeout=1.0)
        time.sleep(3.5)
        assert kept.lost is None and not live.closed
        kept.stop()
    finally:
        server.stop(None)


def test_retries_of_an_unreachable_server_end_within_the_budget():
    import time

    import grpc
    from pyspark.sql.connect.client.retries import Retrying

    from diffcdc.spark.connect import BoundedPolicy

    class Unavailable(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return "failed to connect to all addresses; Connection refused"

        def trailing_metadata(self):
            return None

    attempts = 0
    started = time.monotonic()
    with pytest.raises(Unavailable), pytest.warns(UserWarning, match="RETRIES_EXCEEDED"):
        for attempt in Retrying([BoundedPolicy(2.0)]):
            with attempt:
                attempts += 1
                raise Unavailable()
    took = time.monotonic() - started
    assert attempts > 3 and took < 3.5, (attempts, took)


def test_connect_timeout_is_a_setting_of_the_file_and_the_command_line(tmp_path):
    from diffcdc.cli.parser import build_parser
    from diffcdc.cli.settings import apply_options, run_config_from_args, run_config_from_options
    from diffcdc.config import RunConfig
    from diffcdc.errors import ConfigError

    table = {"name": "T", "source": "s", "keys": ["k"], "landing": "l"}
    assert RunConfig(tables=[table]).spark.connect_timeout == 120.0
    for value in (0, -1):
        with pytest.raises(ConfigError, match="option --connect-timeout: .*greater than 0"):
            run_config_from_options(table, remote="sc://127.0.0.1:15002", connect_timeout=value)
    given = run_config_from_options(table, remote="sc://127.0.0.1:15002", connect_timeout=7.5)
    assert given.spark.connect_timeout == 7.5 and given.spark.remote == "sc://127.0.0.1:15002"
    # the command line's value replaces the file's, and keeps the file's remote
    filed = RunConfig(tables=[table], spark={"remote": "sc://h:1", "connect_timeout": 30.0})
    changed = apply_options(filed, connect_timeout=5.0)
    assert changed.spark.connect_timeout == 5.0 and changed.spark.remote == "sc://h:1"
    args = build_parser().parse_args(["run", "--source", "s", "--keys", "k", "--table", "T",
                                      "--landing", "l", "--connect-timeout", "9"])
    assert run_config_from_args(args).spark.connect_timeout == 9.0
    for command in (["verify", "--table", "T", "--snapshot", "x"], ["repair", "--table", "T"]):
        assert build_parser().parse_args([*command, "--connect-timeout", "3"]).connect_timeout == 3


def test_a_lost_server_under_verify_or_repair_is_one_line(monkeypatch):
    """Outside a table's run (verify, repair), an error that a lost server caused is the same
    one line from the command's last handler; an unreachable server found through the error
    itself (UNAVAILABLE after the retries) loses the session at once."""
    import importlib

    import grpc

    from diffcdc.spark import connect as module
    cli_main = importlib.import_module("diffcdc.cli.main")
    from diffcdc.errors import SparkConnectLost
    from diffcdc.spark.per_session import PerSession
    from tests.support.kafka_broker import free_port

    monkeypatch.setattr(module, "_WATCHES", PerSession())
    session = _Session(f"127.0.0.1:{free_port()}")
    watch = module.ConnectWatch(session, "sc://h:1", 600)  # type: ignore[arg-type]
    module._WATCHES.put(session, watch)  # registered, its thread not started

    class Unavailable(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def __str__(self):
            return ('<_InactiveRpcError status = StatusCode.UNAVAILABLE details = "failed to '
                    'connect to all addresses; last error: Connection refused">')

    assert module.lost_server_error(ValueError("some other failure")) is None
    try:
        try:
            raise Unavailable()
        except Unavailable as inner:
            raise RuntimeError("wrapped by a library") from inner
    except RuntimeError as outer:
        error = module.lost_server_error(outer)
    assert isinstance(error, SparkConnectLost) and error.exit_code == 1
    assert watch.lost == "connection refused" and session.closed
    assert str(error) == ("the Spark Connect server sc://h:1 stopped answering (connection "
                          "refused); the command did not finish — run it again when the server "
                          "is back (connect_timeout / --connect-timeout sets how long diffcdc "
                          "waits for it)")

    def failing(args):
        raise ValueError("Cannot invoke RPC on closed channel!")

    monkeypatch.setattr(cli_main, "_dispatch", failing)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main.main(["status", "--state", "nowhere"])
    assert code == 1
    lines = err.getvalue().strip().splitlines()
    assert lines == [f"diffcdc: error: {error}"], lines
