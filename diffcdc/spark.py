"""The one place a SparkSession is built.

Default: ``local[*]`` on this machine. On a cluster, pass ``master`` (``spark://host:7077``,
``yarn``, ``k8s://...``) and any Spark settings through ``conf``; the settings below that the
engine's correctness relies on are always applied on top.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from diffcdc.errors import DiffcdcError

_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")


def literal_path(path: str) -> str:
    """``path`` escaped for Spark's readers, which expand Hadoop glob patterns in paths.

    Without it a snapshot named ``000[2].parquet`` is read as ``0002.parquet`` and a name with
    ``{a,b}`` is "not found". Writers take paths literally and need no escaping.
    """
    return _GLOB_CHARS.sub(r"\\\1", path)


def spark_path(spark: SparkSession, path: str) -> str:
    """``path`` as Spark's driver must be given it. A Spark Connect server resolves a relative
    path against its own working folder, not this process's: a relative local path goes to it
    absolute (a classic driver is this process, and a relative path may mean the default file
    system's home folder there, so it is left as it is)."""
    from diffcdc.storage.registry import scheme

    if is_connect(spark) and not scheme(path) and not os.path.isabs(path):
        return os.path.abspath(path)
    return path


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process: no
    ``sparkContext``, no RDDs, no Py4J gateway)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def on_this_machine(spark: SparkSession) -> bool:
    """Whether the executors are this process's own children on this machine (a classic
    session with a ``local[...]`` master). Never so for a Spark Connect session: its driver is
    the server's process, wherever the server runs."""
    if is_connect(spark):
        return False
    return str(spark.sparkContext.master).startswith("local")


def spark_label(spark: SparkSession) -> str:
    """What the session runs on, for messages: its master, or its Spark Connect server."""
    if is_connect(spark):
        url = _CONNECT_URLS.get(id(spark))
        return f"the Spark Connect server {url}" if url else "the Spark Connect server"
    return str(spark.sparkContext.master)


#: Seconds a Spark Connect server may go without answering before a run gives up on it
#: (``[spark] connect_timeout``, ``--connect-timeout``).
DEFAULT_CONNECT_TIMEOUT = 120.0

#: What installs the Spark Connect client's packages beside pyspark.
CONNECT_INSTALL = "pip install 'diffcdc[connect]'"

#: The URL (secrets left out) of each Spark Connect session :func:`connect_session` made.
_CONNECT_URLS: dict[int, str] = {}


def read_written(spark: SparkSession, path: str, schema: StructType) -> DataFrame:
    """The Parquet folder ``path`` that a frame of ``schema`` was just written to, read back.

    Spark reads the schema a writer gives as nullable all through, so it is given here as such:
    left to itself, Spark runs a job to read a footer for it (~40-80 ms of a small table's run).
    """
    return spark.read.schema(_nullable(schema)).parquet(literal_path(spark_path(spark, path)))


def _nullable(data_type: DataType) -> Any:
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


#: Settings diffcdc's output depends on; user settings cannot change these.
REQUIRED_CONF: dict[str, str] = {
    # Fingerprints and landing files are defined on UTC instants, never the host's zone.
    "spark.sql.session.timeZone": "UTC",
    # Open Mirroring reads Parquet logical timestamps, not the legacy INT96 encoding.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    # CSV snapshots in any Java charset (cp1252 ...), not only Spark 4's seven: diffcdc checks
    # the bytes against the table's csv_encoding itself, strictly, before Spark reads them.
    "spark.sql.legacy.javaCharsets": "true",
    # No _SUCCESS markers inside staged folders.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    # Tables run concurrently (``parallelism``), each in its own pool: one large table's
    # tasks do not queue the small ones behind it.
    "spark.scheduler.mode": "FAIR",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.memory": "2g",
    # Throughput collector: a diff is a batch job, pauses do not matter, CPU does. Measured at
    # 5M rows on 2 cores: steady run 15.6 s with G1 (the JDK default), 12.7 s with ParallelGC.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
    "spark.executor.extraJavaOptions": "-XX:+UseParallelGC",
    # Parquet is decoded into off-heap column batches: full rows (first load, changed rows)
    # then create no garbage. Measured at 5M rows: changed-row read 1.80 → 1.28 s, first
    # load 24.1 → 20.9 s (benchmarks/README.md).
    "spark.sql.columnVector.offheap.enabled": "true",
    # PySpark otherwise records the Python call site of every Column and DataFrame call in the
    # JVM (five more Py4J round trips each: 1.3-3 ms for an ``F.col``), for error messages
    # diffcdc replaces with its own one-line ones. A small table's run makes hundreds of them.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


#: Incremented each time :func:`build_spark` starts a JVM (tests: "no Spark for no work").
jvm_starts = 0


def build_spark(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "diffcdc",
    log4j_config: str | None = None,
    jvm_output: str | None = None,
    jars: Sequence[str] = (),
    remote: str | None = None,
    connect_timeout: float | None = None,
) -> SparkSession:
    """Return the active SparkSession or build one with diffcdc's settings; with ``remote``
    (``sc://host:port``, else the ``SPARK_REMOTE`` environment variable) a Spark Connect
    session with that server (:func:`connect_session`; ``connect_timeout``: seconds it may go
    without answering, default :data:`DEFAULT_CONNECT_TIMEOUT`).

    ``log4j_config``: a log4j2 properties file for the driver JVM (see :mod:`diffcdc.runlog`:
    the JVM's output goes to the run's log file instead of the terminal); ``jvm_output``: a
    file for what the JVM itself writes to its stderr (start-up warnings, crashes). ``jars``
    (JDBC drivers) go onto the classpath of a new session, beside any ``spark.jars`` in
    ``conf``; a running session cannot load jars any more (a JDBC source then says which
    driver is missing).
    """
    from pyspark.sql import SparkSession

    remote = chosen_remote(master, remote)
    if remote is not None:
        return connect_session(remote, conf, connect_timeout or DEFAULT_CONNECT_TIMEOUT)
    with _without_env("SPARK_REMOTE"):  # pyspark itself would go to it, master or not
        active = SparkSession.getActiveSession()
        if active is not None:
            return require_settings(active)
        return _classic_session(master, conf, app_name, log4j_config, jvm_output, jars)


def chosen_remote(master: str | None, remote: str | None) -> str | None:
    """The Spark Connect server to use: ``remote`` (``--remote``, ``[spark] remote``), else the
    ``SPARK_REMOTE`` environment variable unless a master was chosen (``--master``, ``[spark]
    master``: an explicit choice beats the environment); None: classic Spark."""
    if remote:
        return remote
    if master:
        return None
    return os.environ.get("SPARK_REMOTE") or None


@contextlib.contextmanager
def _without_env(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def _classic_session(master: str | None, conf: Mapping[str, str] | None, app_name: str,
                     log4j_config: str | None, jvm_output: str | None,
                     jars: Sequence[str]) -> SparkSession:
    """A classic session (a driver JVM of this process) with diffcdc's settings."""
    global jvm_starts
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", _python())
    submitted = submitted_conf()
    master = master or os.environ.get("DIFFCDC_SPARK_MASTER")
    settings = session_settings(master, conf, submitted, jars)
    from diffcdc.cds import java_options

    if submitted is None:  # a JVM diffcdc starts itself; under spark-submit it already runs
        cds = java_options()  # start-up: Spark's classes mapped from an archive (diffcdc.cds)
        if cds:
            key = "spark.driver.extraJavaOptions"
            settings[key] = f"{settings.get(key, '')} {cds}".strip()
    if log4j_config:
        key = "spark.driver.extraJavaOptions"
        settings[key] = f"{settings.get(key, '')} -Dlog4j2.configurationFile=file:{log4j_config}".strip()
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    jvm_starts += 1
    with _stderr_to(jvm_output):  # the JVM inherits file descriptor 2 when it is started
        spark = builder.getOrCreate()
    default_level = "WARN" if log4j_config else "ERROR"  # a log file may hold the warnings
    spark.sparkContext.setLogLevel(os.environ.get("DIFFCDC_SPARK_LOG_LEVEL", default_level))
    return spark


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
    from diffcdc.spark_version import require_pyspark, require_server

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
                          f"not installed: {_first_line(exc)}",
                          hint=f"{CONNECT_INSTALL} (nothing was read or written)") from None
    except Exception as exc:  # a malformed URL: pyspark's own one-line error
        raise ConfigError(f"Spark Connect URL {shown}: {_first_line(exc)}",
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
    _CONNECT_URLS[id(spark)] = shown
    if not _WATCHES:
        _at_exit(_lost_at_exit)
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
        self.spark = spark
        self.url = url
        self.timeout = float(timeout)
        self.every = min(10.0, max(0.5, self.timeout / 6))
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="diffcdc-connect-watch",
                                        daemon=True)

    def start(self) -> None:
        earlier = _WATCHES.get(id(self.spark))
        if earlier is not None:  # the same session handed out again (getOrCreate)
            earlier.stop()
        _WATCHES[id(self.spark)] = self
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        import time

        try:
            channel = self.spark.client._builder.toChannel()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - no second channel: the bounded retries stay
            return
        try:
            failing_since: float | None = None
            client = self.spark.client  # type: ignore[attr-defined]
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
            return _first_line(exc)
        return None

    def check_now(self, deadline: float = 2.0) -> None:
        """Probe the server once now (short ``deadline``); one that does not answer is lost."""
        try:
            channel = self.spark.client._builder.toChannel()  # type: ignore[attr-defined]
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
        client = self.spark.client  # type: ignore[attr-defined]
        for close in (lambda: client._channel.close(), client.close):
            try:
                close()
            except Exception:  # noqa: BLE001 - closing what no longer answers
                pass


#: The watch of each Spark Connect session :func:`connect_session` made.
_WATCHES: dict[int, ConnectWatch] = {}


def _lost_at_exit() -> None:
    """At exit, before the interpreter waits for the client's threads (its asynchronous
    ReleaseExecute calls, retried for as long as the retries allow) and before the client's own
    exit handler releases its session: a server that does not answer now is lost (its channel
    closed, so those calls end at once) and not asked again; the process exits at once."""
    for watch in list(_WATCHES.values()):
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
    watch = _WATCHES.get(id(spark)) if spark is not None else None
    if watch is None or watch.spark is not spark:
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

    for watch in list(_WATCHES.values()):
        reason = connect_lost(watch.spark, exc)
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


def redact(url: str) -> str:
    """A Spark Connect URL without its secrets (``;token=...``), for messages."""
    return re.sub(r"(;\s*token\s*=)[^;]*", r"\1***", url, flags=re.IGNORECASE)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _grpc_details(exc: BaseException) -> str:
    """gRPC's own reason (``failed to connect to all addresses ...``), else the first line."""
    found = re.search(r'details = "([^"]*)"', str(exc))
    return found.group(1)[:300] if found else _first_line(exc)


@contextlib.contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """Point this process's file descriptor 2 at ``path`` for a moment (None: leave it)."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def session_settings(
    master: str | None,
    conf: Mapping[str, str] | None,
    submitted: Mapping[str, str] | None,
    jars: Sequence[str] = (),
) -> dict[str, str]:
    """The settings of a new session, ``spark.master`` among them.

    Order: diffcdc's defaults, then what ``spark-submit`` was given (``submitted``: its
    ``--master``, ``--conf`` and ``spark-defaults.conf``, None when diffcdc starts the JVM
    itself), then ``conf`` (``[spark] conf``), then :data:`REQUIRED_CONF`. ``master`` (the
    ``--master`` option, ``[spark] master``) wins over the submitted one; with neither it is
    ``local[*]``.
    """
    given = dict(submitted or {})
    settings = {**DEFAULT_CONF, **given}
    settings["spark.master"] = master or given.get("spark.master") or "local[*]"
    if settings["spark.master"].startswith("local") and submitted is None:
        # A local run talks to itself only: keep the driver on the loopback interface.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    if jars:
        listed = [j for j in settings.get("spark.jars", "").split(",") if j]
        settings["spark.jars"] = ",".join(listed + [j for j in jars if j not in listed])
    settings.update(REQUIRED_CONF)
    return settings


def master_label(master: str | None, remote: str | None = None) -> str:
    """The master a new session will use, for the log, before it starts."""
    remote = chosen_remote(master, remote)
    if remote:
        return f"Spark Connect {redact(remote)}"
    chosen = master or os.environ.get("DIFFCDC_SPARK_MASTER")
    if chosen:
        return chosen
    return "spark-submit's master" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"


def submitted_conf() -> dict[str, str] | None:
    """What ``spark-submit`` started this driver with, or None when it did not.

    ``spark-submit app.py`` starts the driver JVM first (with ``--master``, ``--conf``,
    ``spark-defaults.conf`` as its system properties) and hands this Python process its gateway
    (``PYSPARK_GATEWAY_PORT``); those settings must not be replaced by diffcdc's defaults.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to the running JVM, starts nothing
    return dict(SparkConf().getAll())


#: Required settings a run can do without when a session refuses them (a platform that allows
#: only some settings, as Databricks serverless does): CSV snapshots in Spark's own charsets.
OPTIONAL_CONF = frozenset({"spark.sql.legacy.javaCharsets"})


def require_settings(spark: SparkSession) -> SparkSession:
    """Apply the session settings diffcdc's output depends on to a running session; one that
    the session refuses is a one-line :class:`ConfigError` (unless it already has the value,
    or the run can do without it)."""
    import logging

    from diffcdc.errors import ConfigError

    for key, value in REQUIRED_CONF.items():
        if not key.startswith("spark.sql."):
            continue
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # the platform does not let a session change it
            if _setting(spark, key) == value:
                continue
            if key in OPTIONAL_CONF:
                logging.getLogger("diffcdc").warning(
                    "this Spark session does not let diffcdc set %s (%s): CSV snapshots can be "
                    "read in Spark's own charsets only", key, _first_line(exc))
                continue
            raise ConfigError(
                f"this Spark session does not let diffcdc set {key} = {value}, which its "
                f"output depends on: {_first_line(exc)}",
                hint=f"allow the setting for this session, or set {key} = {value} in the "
                "cluster's Spark configuration; nothing was read or written",
            ) from None
    return spark


def _setting(spark: SparkSession, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a session that cannot even say
        return None
    return None if value is None else str(value)


#: The session settings a run changes in a session it is handed (:func:`require_settings`).
SESSION_KEYS = tuple(k for k in REQUIRED_CONF if k.startswith("spark.sql."))
ZONE = "spark.sql.session.timeZone"


@dataclass(frozen=True)
class CallerSettings:
    """A borrowed session's settings as the caller had them (None: not set, Spark's default)."""

    values: Mapping[str, str | None]
    #: The caller's session time zone, in effect (set or Spark's default): a zone-less
    #: timestamp in the caller's DataFrame means a time in this zone.
    time_zone: str


@contextlib.contextmanager
def borrowed_session(spark: SparkSession) -> Iterator[CallerSettings]:
    """Apply diffcdc's settings to a caller's session for the ``with`` block, then put every
    one of them back as the caller had it (also when the block fails): a library leaves the
    session it was handed as it found it (``run_dataframe`` in a notebook)."""
    caller = CallerSettings({key: _setting(spark, key) for key in SESSION_KEYS},
                            str(spark.conf.get(ZONE)))
    try:
        require_settings(spark)
        yield caller
    finally:
        for key, value in caller.values.items():
            if _setting(spark, key) == value:
                continue  # never changed (also: one the session does not let anyone set)
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextlib.contextmanager
def in_time_zone(spark: SparkSession, zone: str | None) -> Iterator[None]:
    """Run the block with the session in ``zone`` (None: leave it), then back in UTC.

    For evaluating a caller's DataFrame as the caller would: a zone-less timestamp (a CSV
    column, a ``to_timestamp`` of a string) means a time in the caller's zone, and Spark reads
    the session's zone when the query runs, not when the DataFrame was built. What diffcdc then
    does with the values (Parquet instants, fingerprints on microseconds) is zone-free.
    """
    if zone is None or zone == REQUIRED_CONF[ZONE]:
        yield
        return
    spark.conf.set(ZONE, zone)
    try:
        yield
    finally:
        spark.conf.set(ZONE, REQUIRED_CONF[ZONE])


def _python() -> str:
    return sys.executable


def warm_up() -> None:
    """Load the classes a run loads: read, fingerprint-like hashing, aggregate, join, write
    (:func:`diffcdc.cds.build` runs this in a child process to write its archive)."""
    import tempfile

    from pyspark.sql import functions as F

    from diffcdc.spark_compat import to_arrow

    spark = build_spark("local[1]")
    with tempfile.TemporaryDirectory() as tmp:
        df = spark.range(1000).select(F.col("id"), F.xxhash64("id").alias("fp"),
                                      F.current_timestamp().alias("at"))
        df.write.parquet(os.path.join(tmp, "a"))
        back = spark.read.parquet(os.path.join(tmp, "a"))
        joined = back.join(back.groupBy("id").agg(F.max("fp").alias("m")), "id", "full_outer")
        joined.repartition(2, "id").write.option("compression", "zstd").parquet(os.path.join(tmp, "b"))
        to_arrow(spark.read.parquet(os.path.join(tmp, "b")))
    spark.stop()
