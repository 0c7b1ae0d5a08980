"""Spark Connect sessions: one made with diffcdc's settings, and the watch that ends it when its
server stops answering (so no call waits for minutes on a server that is gone)."""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from diffcdc.spark.per_session import PerSession
from diffcdc.spark.settings import DEFAULT_CONF, first_line, require_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from diffcdc.errors import DiffcdcError

#: Seconds a Spark Connect server may go without answering before a run gives up on it
#: (``[spark] connect_timeout``, ``--connect-timeout``).
DEFAULT_CONNECT_TIMEOUT = 120.0

#: What installs the Spark Connect client's packages beside pyspark.
CONNECT_INSTALL = "pip install 'diffcdc[connect]'"


def connect_session(url: str, conf: Mapping[str, str] | None = None,
                    timeout: float = DEFAULT_CONNECT_TIMEOUT) -> SparkSession:
    """A Spark Connect session with the server at ``url``, with diffcdc's session settings.

    The server is asked for its version at once, with a short retry (the client's default
    retries an unreachable server for minutes): an unreachable URL or a server diffcdc does not
    run on is one line naming the URL, before anything is read or written. Settings of
    ``conf`` that a session cannot change (``spark.executor.memory`` ...) are the server's to
    set; they are left out with a warning. A server that then stops answering for ``timeout``
    seconds (killed, hung, its network gone) ends the session (:class:`ConnectWatch`).
    """
    import logging
    import warnings

    from diffcdc.errors import ConfigError
    from diffcdc.spark.version import require_pyspark, require_server

    if not timeout > 0:
        raise ConfigError(f"connect_timeout must be a positive number of seconds, got {timeout}",
                          hint="give --connect-timeout SECONDS or [spark] connect_timeout")
    require_pyspark(connect=True)
    from pyspark.sql import SparkSession

    shown = redact(url)
    try:
        # no options here: the builder would send them at once, retried for minutes
        spark = SparkSession.builder.remote(url).getOrCreate()
    except ImportError as exc:  # the gRPC client's packages (PySparkImportError among them)
        raise ConfigError(f"Spark Connect {shown}: the Spark Connect client's packages are "
                          f"not installed: {first_line(exc)}",
                          hint=f"{CONNECT_INSTALL} (nothing was read or written)") from None
    except Exception as exc:  # a malformed URL: pyspark's own one-line error
        raise ConfigError(f"Spark Connect URL {shown}: {first_line(exc)}",
                          hint="give it as sc://host:port (see docs/platforms.md)") from None
    client = spark.client  # type: ignore[attr-defined]
    retries = client.get_retry_policies()
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        client.set_retry_policies([DefaultPolicy(max_retries=3, initial_backoff=250,
                                                 max_backoff=2000, backoff_multiplier=2.0)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyspark's own "retries exceeded" warning
            version = spark.version
    except Exception as exc:
        _abandon(spark)
        raise ConfigError(f"the Spark Connect server at {shown} does not answer: "
                          f"{_grpc_details(exc)}",
                          hint="start the server or check the URL (host, port, token); "
                          "nothing was read or written") from None
    del retries  # pyspark's own retry an unreachable server for ten minutes and more
    watch = ConnectWatch(spark, shown, timeout)
    # a little longer than the watch: a lost server is the watch's to say, for every call alike
    client.set_retry_policies([BoundedPolicy(timeout + 2 * watch.every)])
    require_server(version, shown)
    _exit_check_once()
    watch.start()
    settings = {k: v for k, v in DEFAULT_CONF.items() if k.startswith("spark.sql.")}
    ignored = []
    for key, value in (conf or {}).items():
        if key.startswith("spark.sql."):
            settings[key] = value
        else:
            ignored.append(key)
    if ignored:
        logging.getLogger("diffcdc").warning(
            "Spark Connect: %s cannot be set from a client (the server's settings); ignored",
            ", ".join(sorted(ignored)))
    for key, value in settings.items():
        spark.conf.set(key, value)
    return require_settings(spark)


#: A method no Spark Connect server has: any live server answers it at once (UNIMPLEMENTED,
#: or UNAUTHENTICATED behind a token check), a hung one never, a dead one cannot be reached.
_PROBE = "/diffcdc.ConnectWatch/Probe"


def _policy_classes() -> tuple[type, type]:
    from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState

    return DefaultPolicy, RetryPolicyState


def BoundedPolicy(seconds: float) -> Any:  # noqa: N802 - a class made on first use
    """pyspark's default retry policy (what it retries: an unreachable server, a cut stream
    ...), with short backoffs and a budget of ``seconds`` from the first failure of a call on:
    a call that still fails then raises (pyspark's own policy retries for ten minutes and more)."""
    global _BOUNDED
    if _BOUNDED is None:
        default_policy, state_class = _policy_classes()

        class _State(state_class):  # type: ignore[misc, valid-type]
            def next_attempt(self, exception: BaseException | None = None) -> int | None:
                import time

                now = time.monotonic()
                first = self.__dict__.setdefault("_diffcdc_first", now)
                wait = super().next_attempt(exception)
                if wait is None or now - first + wait / 1000 > self.policy.budget:
                    return None
                return wait

        class _Bounded(default_policy):  # type: ignore[misc, valid-type]
            def __init__(self, budget: float) -> None:
                backoff = int(min(5000, max(200, budget * 1000 / 8)))
                super().__init__(max_retries=None, initial_backoff=200, max_backoff=backoff,
                                 backoff_multiplier=2.0, jitter=200, min_jitter_threshold=1000,
                                 max_server_retry_delay=backoff)
                self.budget = budget

            def to_state(self) -> Any:
                return _State(self)

        _BOUNDED = _Bounded
    return _BOUNDED(seconds)


_BOUNDED: Any = None


class ConnectWatch:
    """Watches a Spark Connect session's server while the session lives.

    A daemon thread probes the server on a channel of its own (same URL and credentials)
    every few seconds, each probe with a short deadline; a server that answers nothing for
    ``timeout`` seconds (killed: refused; hung, e.g. stopped: no answer) is lost. Then the
    session's channel is closed: every call in flight or to come fails at once (no stream
    waits for minutes, no exit handler asks the dead server again), and :func:`connect_lost`
    says why. A server that answers again before ``timeout`` is kept.
    """

    def __init__(self, spark: SparkSession, url: str, timeout: float) -> None:
        # the session weakly (it owns its watch: :data:`_WATCHES`), its client for good
        self._session = weakref.ref(spark)
        self.client = spark.client  # type: ignore[attr-defined]
        self.url = url
        self.timeout = float(timeout)
        self.every = min(10.0, max(0.5, self.timeout / 6))
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="diffcdc-connect-watch",
                                        daemon=True)

    def start(self) -> None:
        spark = self._session()
        if spark is None:  # the session is gone already: nothing to watch
            return
        earlier = _WATCHES.put(spark, self)
        if earlier is not None:  # the same session handed out again (getOrCreate)
            earlier.stop()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        import time

        try:
            channel = self.client._builder.toChannel()
        except Exception:  # noqa: BLE001 - no second channel: the bounded retries stay
            return
        try:
            failing_since: float | None = None
            client = self.client
            while not self._stop.is_set() and self.lost is None:
                if getattr(client, "is_closed", False):  # the session was stopped
                    return
                started = time.monotonic()
                reason = self._probe(channel)
                now = time.monotonic()
                if reason is None:
                    failing_since = None
                else:
                    failing_since = started if failing_since is None else failing_since
                    if now - failing_since >= self.timeout:
                        self.lose(f"{reason}, for {now - failing_since:.0f} s")
                        return
                self._stop.wait(max(0.0, self.every - (now - started)))
        finally:
            channel.close()

    def _probe(self, channel: Any, deadline: float | None = None) -> str | None:
        """None when the server answered, else why not."""
        import grpc

        probe = channel.unary_unary(_PROBE)
        try:
            probe(b"", timeout=deadline or self.every)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "no answer"
            if code == grpc.StatusCode.UNAVAILABLE:
                return _unreachable(exc.details() or "")  # type: ignore[attr-defined]
            return None  # it answered: UNIMPLEMENTED, UNAUTHENTICATED ...
        except Exception as exc:  # noqa: BLE001 - a closed channel ...: not the server's answer
            return first_line(exc)
        return None

    def check_now(self, deadline: float = 2.0) -> None:
        """Probe the server once now (short ``deadline``); one that does not answer is lost."""
        try:
            channel = self.client._builder.toChannel()
        except Exception:  # noqa: BLE001 - no second channel: nothing to say
            return
        try:
            reason = self._probe(channel, deadline)
        finally:
            channel.close()
        if reason is not None:
            self.lose(reason)

    def lose(self, reason: str) -> None:
        """The server is lost: close the session's channel (calls in flight fail at once)."""
        if self.lost is not None:
            return
        self.lost = reason
        self._stop.set()
        import logging

        logging.getLogger("diffcdc").debug("Spark Connect server %s lost: %s", self.url, reason)
        client = self.client
        for close in (lambda: client._channel.close(), client.close):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing what no longer answers
                pass


#: The watch of each Spark Connect session :func:`connect_session` made, while it lives; a
#: watch that lost its server (and closed the session) stays to say why.
_WATCHES: PerSession[ConnectWatch] = PerSession(outlives_stop=lambda watch: watch.lost is not None)
_exit_check = threading.Lock()
_exit_checked: list[bool] = []


def _exit_check_once() -> None:
    """Have :func:`_lost_at_exit` run at exit (registered once per process)."""
    with _exit_check:
        if not _exit_checked:
            _exit_checked.append(True)
            _at_exit(_lost_at_exit)


def _lost_at_exit() -> None:
    """At exit, before the interpreter waits for the client's threads (its asynchronous
    ReleaseExecute calls, retried for as long as the retries allow) and before the client's own
    exit handler releases its session: a server that does not answer now is lost (its channel
    closed, so those calls end at once) and not asked again; the process exits at once."""
    for _, watch in _WATCHES.items():
        if watch.lost is None:
            watch.check_now()


def _at_exit(call: Any) -> None:
    """Run ``call`` at interpreter exit before the thread pools are joined (``threading``'s own
    exit hooks run last-registered first, before ``atexit``'s; the pools' hook is older)."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(call)
            return
        except RuntimeError:  # the interpreter is already shutting down
            return
    import atexit

    atexit.register(call)


def _unreachable(details: str) -> str:
    """gRPC's reason an address cannot be reached, in a few words."""
    for words in ("Connection refused", "Connection reset", "Socket closed",
                  "Connection timed out", "No route to host"):
        if words.lower() in details.lower():
            return words.lower()
    return details.strip().splitlines()[0][:120] if details.strip() else "unreachable"


def connect_lost(spark: SparkSession | None, exc: BaseException | None = None) -> str | None:
    """Why ``spark``'s Spark Connect server counts as lost (None: it does not, or ``spark`` is
    no session :func:`connect_session` made).

    Lost: its :class:`ConnectWatch` saw it answer nothing for the timeout, or ``exc`` (or an
    exception it was raised from) is a gRPC failure to reach it that outlived the retries
    (UNAVAILABLE, DEADLINE_EXCEEDED); the session is then ended as the watch would.
    """
    watch = _WATCHES.get(spark) if spark is not None else None
    if watch is None:
        return None
    if watch.lost is None and exc is not None:
        reason = _grpc_unreachable(exc)
        if reason is not None:
            watch.lose(reason)
    return watch.lost


def lost_server_error(exc: BaseException) -> DiffcdcError | None:
    """A one-line error for a command (``verify``, ``repair`` ...) whose Spark Connect server
    was lost while it ran (None: no server of this process was lost)."""
    from diffcdc.errors import SparkConnectLost

    for spark, watch in _WATCHES.items():
        reason = connect_lost(spark, exc)
        if reason is not None:
            return SparkConnectLost(
                f"the Spark Connect server {watch.url} stopped answering ({reason}); the "
                "command did not finish",
                hint="run it again when the server is back (connect_timeout / "
                "--connect-timeout sets how long diffcdc waits for it)")
    return None


def _grpc_unreachable(exc: BaseException) -> str | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "_grpc_status_code", None) or getattr(current, "code", None)
        text = str(current)
        if callable(code):
            try:
                code = code()
            except Exception:  # noqa: BLE001 - not a gRPC call after all
                code = None
        name = getattr(code, "name", str(code or ""))
        if "UNAVAILABLE" in name or "StatusCode.UNAVAILABLE" in text:
            return _unreachable(text)
        if "DEADLINE_EXCEEDED" in name or "StatusCode.DEADLINE_EXCEEDED" in text:
            return "no answer"
        current = current.__cause__ or current.__context__
    return None


def _abandon(spark: SparkSession) -> None:
    """Close a Spark Connect session whose server does not answer, without a word to it: its
    client would otherwise ask the server again at exit, retrying for minutes."""
    import logging

    spark.client.set_retry_policies([])  # type: ignore[attr-defined]
    spark.release_session_on_close = False  # type: ignore[attr-defined]
    quiet = logging.getLogger("pyspark")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - closing what never worked
        pass
    finally:
        quiet.setLevel(level)


def connect_url(spark: SparkSession) -> str | None:
    """The URL (secrets left out) of a Spark Connect session :func:`connect_session` made."""
    watch = _WATCHES.get(spark)
    return watch.url if watch is not None else None


def redact(url: str) -> str:
    """A Spark Connect URL without its secrets (``;token=...``), for messages."""
    return re.sub(r"(;\s*token\s*=)[^;]*", r"\1***", url, flags=re.IGNORECASE)


def _grpc_details(exc: BaseException) -> str:
    """gRPC's own reason (``failed to connect to all addresses ...``), else the first line."""
    found = re.search(r'details = "([^"]*)"', str(exc))
    return found.group(1)[:300] if found else first_line(exc)

