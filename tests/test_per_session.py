"""What diffcdc keeps per Spark session lives as long as the session (issue 40.4): keyed by the
session object (no ``id()`` a later session may be given again), gone when the session is
stopped or collected, never shared between two sessions. Fake sessions first (no Spark), then a
real classic session (the suite's) and a real Spark Connect session (a client without Java)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import weakref
from typing import Any

import pytest

from diffcdc.spark import connect
from diffcdc.spark.per_session import PerSession, stopped


class _Client:
    """A Spark Connect client as :class:`ConnectWatch` uses it (no server behind it)."""

    def __init__(self) -> None:
        self.is_closed = False

        class Channel:
            def close(self) -> None:
                pass

        self._channel = Channel()

    def close(self) -> None:
        self.is_closed = True


class _ConnectLike:
    """A Spark Connect session as far as stopping goes: ``is_stopped`` is its client closed."""

    def __init__(self) -> None:
        self.client = _Client()

    @property
    def is_stopped(self) -> bool:
        return self.client.is_closed

    def stop(self) -> None:
        self.client.close()


class _ClassicLike:
    """A classic session as far as stopping goes: its SparkContext's ``_jsc`` goes on stop."""

    def __init__(self) -> None:
        class Context:
            _jsc: object | None = object()

        self._sc = Context()

    def stop(self) -> None:
        self._sc._jsc = None


@pytest.mark.parametrize("kind", [_ConnectLike, _ClassicLike])
def test_two_sessions_do_not_share_entries_and_a_stopped_one_s_are_gone(kind):
    cache: PerSession[list[str]] = PerSession()
    first, second = kind(), kind()
    cache.get_or_make(first, lambda: ["first"]).append("again")
    assert cache.get_or_make(first, lambda: ["made twice"]) == ["first", "again"]
    assert cache.get(second) is None
    cache.put(second, ["second"])
    assert cache.get(first) == ["first", "again"] and cache.get(second) == ["second"]
    assert not stopped(first)
    first.stop()
    assert stopped(first)
    assert cache.get(first) is None
    assert [value for _, value in cache.items()] == [["second"]]
    assert cache.get_or_make(first, lambda: ["new"]) == ["new"]  # a stopped one keeps nothing
    assert cache.get(first) is None


def test_a_collected_session_s_entries_are_gone():
    cache: PerSession[str] = PerSession()
    session = _ConnectLike()
    cache.put(session, "kept while it lives")
    assert len(cache) == 1
    del session
    gc.collect()
    assert cache.items() == []


def test_a_watch_keeps_no_session_alive_and_a_lost_one_stays_to_say_why():
    session = _ConnectLike()
    watch = connect.ConnectWatch(session, "sc://h:1", 600)  # type: ignore[arg-type]
    connect._WATCHES.put(session, watch)  # registered, its thread not started
    assert connect.connect_url(session) == "sc://h:1"  # type: ignore[arg-type]
    other = _ConnectLike()
    assert connect.connect_url(other) is None and connect.connect_lost(other) is None  # type: ignore[arg-type]

    lost = _ConnectLike()
    lost_watch = connect.ConnectWatch(lost, "sc://h:2", 600)  # type: ignore[arg-type]
    connect._WATCHES.put(lost, lost_watch)
    lost_watch.lose("no answer, for 600 s")  # closes the session's client: it is stopped
    assert stopped(lost)
    assert connect.connect_lost(lost) == "no answer, for 600 s"  # type: ignore[arg-type]

    session.stop()  # stopped by its user: its watch goes
    assert connect.connect_url(session) is None  # type: ignore[arg-type]
    assert all(spark is not session for spark, _ in connect._WATCHES.items())
    gone = [weakref.ref(session), weakref.ref(lost)]
    del session, lost, watch
    gc.collect()
    assert [ref() for ref in gone] == [None, None]  # no watch keeps its session alive
    assert lost_watch not in [found for _, found in connect._WATCHES.items()]


def test_a_classic_session_has_its_own_entries(spark):
    cache: PerSession[str] = PerSession()
    other = spark.newSession()  # the same SparkContext, another session
    cache.put(spark, "the suite's")
    assert cache.get(other) is None
    cache.put(other, "its own")
    assert cache.get(spark) == "the suite's" and cache.get(other) == "its own"
    assert not stopped(spark) and not stopped(other)


_CONNECT_CLIENT = textwrap.dedent("""
    import gc, json, sys
    from diffcdc.cli import progress
    from diffcdc.spark import connect
    from diffcdc.spark.connect import connect_session
    from diffcdc.spark.session import spark_label

    spark = connect_session(sys.argv[1])
    progress.active_stages(spark)
    facts = {"label": spark_label(spark), "watches": len(connect._WATCHES.items()),
             "feeds": len(progress._FEEDS.items())}
    spark.stop()
    facts.update(stopped_watches=len(connect._WATCHES.items()),
                 stopped_feeds=len(progress._FEEDS.items()),
                 stopped_label=spark_label(spark))
    print(json.dumps(facts))
""")


@pytest.mark.slow
@pytest.mark.connect
def test_a_stopped_connect_session_keeps_nothing(connect_server, tmp_path):
    from tests.support.connect_server import client_env

    done = subprocess.run([sys.executable, "-c", _CONNECT_CLIENT, connect_server.url],
                          cwd=tmp_path, env=client_env(str(tmp_path)), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    facts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {"label": f"the Spark Connect server {connect_server.url}", "watches": 1,
                     "feeds": 1, "stopped_watches": 0, "stopped_feeds": 0,
                     "stopped_label": "the Spark Connect server"}, done.stderr[-3000:]
