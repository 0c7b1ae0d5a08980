"""Session settings (no Spark): diffcdc's defaults, spark-submit's, the config's, the required."""

from __future__ import annotations

import logging
import os

from diffcdc.engine.executors import executor_failure
from diffcdc.spark.settings import DEFAULT_CONF, REQUIRED_CONF, session_settings


def test_a_jvm_diffcdc_starts_itself_gets_the_defaults_and_local_loopback():
    got = session_settings(None, {"spark.driver.memory": "4g"}, None)
    assert got["spark.master"] == "local[*]" and got["spark.driver.host"] == "127.0.0.1"
    assert got["spark.driver.memory"] == "4g"
    assert got["spark.sql.shuffle.partitions"] == DEFAULT_CONF["spark.sql.shuffle.partitions"]
    cluster = session_settings("spark://h:7077", None, None)
    assert cluster["spark.master"] == "spark://h:7077" and "spark.driver.host" not in cluster


def test_spark_submit_settings_are_kept_and_only_the_required_ones_win():
    submitted = {"spark.master": "yarn", "spark.sql.shuffle.partitions": "400",
                 "spark.sql.session.timeZone": "Europe/Berlin", "spark.jars": "/x.jar"}
    got = session_settings(None, None, submitted, jars=["/pg.jar"])
    assert got["spark.master"] == "yarn"  # not replaced by local[*]
    assert got["spark.sql.shuffle.partitions"] == "400"  # not replaced by diffcdc's default
    assert "spark.driver.host" not in got
    assert got["spark.jars"] == "/x.jar,/pg.jar"
    assert {k: got[k] for k in REQUIRED_CONF} == REQUIRED_CONF
    # an explicit --master / [spark] master and [spark] conf still win over the submitted ones
    mine = session_settings("spark://h:7077", {"spark.sql.shuffle.partitions": "16"}, submitted)
    assert (mine["spark.master"], mine["spark.sql.shuffle.partitions"]) == ("spark://h:7077", "16")


def test_the_executor_failure_is_the_last_error_line_of_the_task_trace():
    trace = ("An exception was thrown from the Python worker. Please see the stack trace below.\n"
             "Traceback (most recent call last):\n  File \"worker.py\", line 1, in main\n"
             "ModuleNotFoundError: No module named 'pydantic'\n\n  at org.apache.spark.Foo(x)\n")
    assert executor_failure(RuntimeError(trace)) == "ModuleNotFoundError: No module named 'pydantic'"
    assert executor_failure(RuntimeError("")) == "RuntimeError"


def test_the_log_names_the_master_a_run_will_use(monkeypatch):
    from diffcdc.spark.session import master_label

    monkeypatch.delenv("DIFFCDC_SPARK_MASTER", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert master_label(None) == "local[*]" and master_label("yarn") == "yarn"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "12345")
    assert master_label(None) == "spark-submit's master"
    monkeypatch.setenv("DIFFCDC_SPARK_MASTER", "spark://h:7077")
    assert master_label(None) == "spark://h:7077"


class _Conf:
    """A session's settings where some cannot be changed (as on Databricks serverless)."""

    def __init__(self, values: dict[str, str], locked: set[str]) -> None:
        self.values, self.locked = dict(values), locked

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        if key in self.locked:
            raise RuntimeError(f"[CANNOT_MODIFY_CONFIG] Cannot modify the value of {key}.\nmore")
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Session:
    def __init__(self, conf: _Conf) -> None:
        self.conf = conf


def test_a_setting_the_session_refuses_is_one_line_and_the_session_is_put_back():
    import pytest

    from diffcdc.errors import ConfigError
    from diffcdc.spark.settings import borrowed_session

    conf = _Conf({"spark.sql.session.timeZone": "Asia/Tokyo"},
                 {"spark.sql.parquet.outputTimestampType"})
    with pytest.raises(ConfigError) as refused:
        with borrowed_session(_Session(conf)):
            raise AssertionError("not reached")
    text = str(refused.value)
    assert "\n" not in text and "spark.sql.parquet.outputTimestampType = TIMESTAMP_MICROS" in text
    assert "CANNOT_MODIFY_CONFIG" in text and "nothing was read or written" in text
    assert conf.values == {"spark.sql.session.timeZone": "Asia/Tokyo"}  # as it was handed over


def test_a_setting_the_session_refuses_but_already_has_or_can_miss_is_fine(caplog):
    from diffcdc.spark.settings import REQUIRED_CONF, borrowed_session

    have = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    conf = _Conf(have, {"spark.sql.parquet.outputTimestampType", "spark.sql.legacy.javaCharsets"})
    logger = logging.getLogger("diffcdc")  # its own handlers may not propagate (the CLI's)
    logger.addHandler(caplog.handler)
    try:
        with borrowed_session(_Session(conf)):
            assert conf.values == {k: v for k, v in REQUIRED_CONF.items()
                                   if k.startswith("spark.sql.") and k != "spark.sql.legacy.javaCharsets"}
    finally:
        logger.removeHandler(caplog.handler)
    assert conf.values == have
    assert "spark.sql.legacy.javaCharsets" in caplog.text


def test_remote_comes_from_the_option_then_the_environment_unless_a_master_was_chosen(
        monkeypatch):
    from diffcdc.spark.session import chosen_remote, master_label

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert chosen_remote(None, None) is None
    assert chosen_remote(None, "sc://a:1") == "sc://a:1"
    monkeypatch.setenv("SPARK_REMOTE", "sc://env:15002/;token=abc")
    assert chosen_remote(None, None) == "sc://env:15002/;token=abc"
    assert chosen_remote("local[1]", None) is None  # an explicit master beats the environment
    assert chosen_remote(None, "sc://a:1") == "sc://a:1"
    assert master_label(None) == "Spark Connect sc://env:15002/;token=***"
    assert master_label("spark://h:7077") == "spark://h:7077"


def test_an_explicit_master_is_classic_even_with_spark_remote_set(spark, monkeypatch):
    from diffcdc.spark import session as sessions

    def refuse(*args, **kwargs):
        raise AssertionError("went to Spark Connect")

    monkeypatch.setattr(sessions, "connect_session", refuse)
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    got = sessions.build_spark("local[2]")  # the running classic session, not a Connect one
    assert got is spark and not sessions.is_connect(got)
    assert os.environ["SPARK_REMOTE"] == "sc://127.0.0.1:1"  # put back
