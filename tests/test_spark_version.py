"""pyspark is not a hard dependency: a missing or unsupported one is one line naming what was
found and what to install (issue 29.1)."""

from __future__ import annotations

import os
import sys

import pytest

from diffcdc.cli.main import main
from diffcdc.errors import ConfigError
from diffcdc.spark import version as spark_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(("version", "classic", "connect"), [
    ("3.4.4", False, False),
    ("3.5.0", True, False),
    ("3.5.7.dev0", True, False),
    ("4.0.1", True, True),
    ("4.3.0", True, True),
    ("15.4.x-scala2.12", False, False),
    ("5.0.0", False, False),
])
def test_supported_versions(version, classic, connect):
    assert spark_version.supported(version, connect=False) is classic
    assert spark_version.supported(version, connect=True) is connect


def test_no_pyspark_is_one_line_naming_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if it were not installed
    code = main(["run", "--source", "s", "--keys", "k", "--table", "T", "--landing", "l",
                 "--state", "st"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0
    assert "PySpark is not installed" in err and 'pip install "diffcdc[spark]"' in err


def test_run_dataframe_without_pyspark_is_a_config_error(monkeypatch):
    import diffcdc

    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(ConfigError, match=r"PySpark is not installed.*diffcdc\[spark\]"):
        diffcdc.run_dataframe(object(), table="T", keys=["k"], landing="l")


def test_an_unsupported_pyspark_is_named(monkeypatch, capsys):
    monkeypatch.setattr(spark_version, "installed", lambda: "3.4.1")
    code = main(["status", "--state", "st"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "PySpark 3.4.1 is not supported" in err and "3.5.x or 4.x" in err
    assert 'pip install "diffcdc[spark]"' in err


def test_a_connect_server_of_another_major_version_is_refused():
    with pytest.raises(ConfigError, match=r"sc://h:15002 runs Spark 3\.5\.3.*Spark Connect 4"):
        spark_version.require_server("3.5.3", "sc://h:15002")
    spark_version.require_server("4.1.0", "sc://h:15002")


def test_pyspark_is_an_extra_not_a_dependency():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    names = [d.split(";")[0].replace(" ", "").lower() for d in project["dependencies"]]
    assert not [d for d in names if d.startswith("pyspark")], names
    assert project["optional-dependencies"]["spark"] == ["pyspark>=3.5,<5"]
    # the README's set-up commands install the extra (with every sink's: `all`)
    with open(os.path.join(ROOT, ".ci", "install")) as f:
        install = f.read()
    assert 'extras="[spark,all]"' in install and "[spark,all,connect,test,bench]" in install
