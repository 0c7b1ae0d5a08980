"""A configuration folder with files on the driver's class path (SPARK_CONF_DIR, HADOOP_CONF_DIR,
YARN_CONF_DIR): the JVM can write no class-data-sharing archive then and prints a line on
stdout if asked to, so diffcdc asks for none (diffcdc.cds)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from diffcdc import cds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def no_conf(monkeypatch, tmp_path):
    for name in ("SPARK_CONF_DIR", "SPARK_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(cds.ENV, "1")
    return monkeypatch


@pytest.mark.unit
@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"])
def test_a_conf_folder_with_files_turns_the_archive_off(no_conf, tmp_path, variable):
    if cds.archive_key() is None:
        pytest.skip("no java here")
    folder = tmp_path / "conf"
    folder.mkdir()
    no_conf.setenv(variable, str(folder))
    assert "-XX:ArchiveClassesAtExit=" in cds.java_options()  # an empty folder is no matter
    (folder / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert cds.java_options() == ""


@pytest.mark.unit
def test_spark_home_conf_is_the_conf_folder_when_spark_conf_dir_is_not_set(no_conf, tmp_path):
    if cds.archive_key() is None:
        pytest.skip("no java here")
    (tmp_path / "home" / "conf").mkdir(parents=True)
    (tmp_path / "home" / "conf" / "log4j2.properties").write_text("")
    no_conf.setenv("SPARK_HOME", str(tmp_path / "home"))
    assert cds.java_options() == ""
    no_conf.setenv("SPARK_CONF_DIR", str(tmp_path / "empty"))  # set: SPARK_HOME's is not used
    assert cds.java_options() != ""


@pytest.mark.slow
def test_a_run_with_a_conf_folder_prints_nothing_of_the_jvm_on_stdout(tmp_path):
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "spark-defaults.conf").write_text("spark.ui.showConsoleProgress false\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), cds.ENV: "1",
           "PYTHONPATH": ROOT, "SPARK_CONF_DIR": str(folder)}
    job = ("from diffcdc.spark.session import build_spark\n"
           "s = build_spark('local[1]')\n"
           "assert s.range(5).count() == 5\n"
           "s.stop()\n"
           "print('done')\n")
    done = subprocess.run([sys.executable, "-c", job], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "done", done.stdout
    assert not os.path.exists(tmp_path / "cache" / "diffcdc" / "cds") or not os.listdir(
        tmp_path / "cache" / "diffcdc" / "cds")
