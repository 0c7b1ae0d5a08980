"""Fixtures that test modules share (tests/conftest.py registers this module as a plugin, so no
test module imports another for a fixture): loopback servers, the CLI's logger put back, the
fault-injecting in-memory sinks.

The servers start in this process on loopback; their harnesses are imported only when a test
asks for one, so the unit tier imports none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def server() -> Iterator[Any]:
    """The loopback DFS server (ADLS Gen2 API) with the filesystem ``ws``; the test fails if the
    server itself hit a bug. (A module may define its own ``server``, which then wins.)"""
    from tests.support.dfs_server import DfsServer

    with DfsServer() as srv:
        srv.create_filesystem("ws")
        yield srv
        assert srv.errors == [], "the test server hit a bug:\n" + "\n".join(srv.errors)


@pytest.fixture(scope="module")
def servers(broker, postgres) -> Iterator[dict[str, Any]]:
    """The servers sink kinds need (tests/support/sink_kinds.py ``servers[...]``), on loopback:
    a DFS server with the filesystem ``ws`` for the module, the session's Kafka broker and
    PostgreSQL server (its password in the variable the PostgreSQL kinds' password_env names)."""
    import os

    from tests.support.dfs_server import DfsServer
    from tests.support.sink_kinds import PG_PASSWORD_ENV

    os.environ[PG_PASSWORD_ENV] = postgres.password
    with DfsServer() as dfs:
        dfs.create_filesystem("ws")
        yield {"dfs": dfs, "kafka": broker, "postgres": postgres}


@pytest.fixture
def webhdfs(tmp_path: Any) -> Iterator[Any]:
    """A started loopback WebHDFS server over ``tmp_path/webhdfs``, stopped at the end."""
    from tests.support.webhdfs_server import WebHdfsServer

    with WebHdfsServer(str(tmp_path / "webhdfs")) as srv:
        yield srv


@pytest.fixture
def cli_logging() -> Iterator[None]:
    """Put the ``diffcdc`` logger back the way it was after in-process CLI calls."""
    logger = logging.getLogger("diffcdc")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    for handler in logger.handlers:
        if handler not in saved[0]:
            handler.close()  # e.g. a run's log file
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


@pytest.fixture
def memory_sinks() -> Any:
    """In-memory sinks for this test, told to fail where the test says
    (:class:`tests.support.memory_sink.MemorySinks`); runs build them for its table configs."""
    from tests.support.memory_sink import MemorySinks

    with MemorySinks.registered() as sinks:
        yield sinks


@pytest.fixture
def http_receiver() -> Iterator[Any]:
    """An HTTP receiver on 127.0.0.1 keeping every request (tests/support/http_receiver.py):
    the OpenLineage receiver and Pushgateway of the observe tests."""
    from tests.support.http_receiver import start_receiver

    receiver, server = start_receiver()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
