"""The extras: ``pip install diffcdc`` runs a landing-folder table without any sink's library,
the Azure SDK or great_expectations; a config that needs one of them is refused at load, before
Spark, in one line naming the extra to install (exit 2)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from diffcdc import extras
from diffcdc.errors import ConfigError
from tests.support.blocked_extras import EXTRA_MODULES, ROOT, run_blocked
from tests.support.cli_runs import rows, run_args, write

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: The top-level modules each extra brings (what a missing extra is simulated with).
BLOCK = {"delta": ("deltalake",), "kafka": ("confluent_kafka", "fastavro"), "adls": ("azure",),
         "gx": ("great_expectations", "pandas"), "lineage": ("openlineage",),
         "metrics": ("prometheus_client",),
         "postgres": ("psycopg",)}

#: The only diffcdc modules that import an extra's library when they are imported: each loaded
#: only when a config uses that sink or storage (the gate's great-expectations part imports it
#: inside its functions).
EXTRA_USERS = {
    "diffcdc.sinks.delta.feed": "deltalake",
    "diffcdc.sinks.delta.history": "deltalake",
    "diffcdc.sinks.delta.sink": "deltalake",
    "diffcdc.sinks.delta.target_check": "deltalake",
    "diffcdc.sinks.kafka.client": "confluent_kafka",
    "diffcdc.sinks.kafka.publish": "confluent_kafka",
    "diffcdc.sinks.kafka.replay": "fastavro",
    "diffcdc.sinks.kafka.sink": "confluent_kafka",
    **{f"diffcdc.sinks.postgres.{m}": "psycopg" for m in (
        "apply_sql", "bookkeeping", "catalog", "copy", "dialect", "history_sql", "replay", "sink",
        "types")},
    "diffcdc.storage.adls": "azure",
    "diffcdc.storage.adls_credentials": "azure",
    "diffcdc.storage.adls_transport": "azure",
}


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0] \
        .strip().lower().replace("_", "-")


def test_each_extra_of_the_table_is_in_pyproject_and_all_takes_every_one():
    project = _pyproject()
    optional = project["optional-dependencies"]
    core = {_name(r) for r in project["dependencies"]}
    for extra in extras.EXTRAS.values():
        assert extra.name in optional, extra.name
        assert not core & {_name(r) for r in optional[extra.name]}, (extra.name, core)
    assert optional["all"] == [f"diffcdc[{','.join(extras.EXTRAS)}]"]
    assert set(extras.EXTRAS) == set(BLOCK)
    assert set(EXTRA_MODULES) == {m for mods in BLOCK.values() for m in mods}
    assert {"deltalake", "confluent-kafka", "fastavro", "great-expectations", "pandas",
            "azure-storage-file-datalake", "azure-identity"}.isdisjoint(core)


def test_a_missing_library_is_one_config_error_naming_the_extra():
    absent = extras.Extra("delta", "the Delta sink", "the deltalake library",
                          ("diffcdc_test_no_such_module",))
    with pytest.raises(ConfigError) as caught:
        extras.require(absent, table="T", where="sink delta")
    assert caught.value.exit_code == 2
    assert str(caught.value) == ("table T: sink delta: the Delta sink needs the deltalake "
                                 "library (not installed) — pip install 'diffcdc[delta]'")
    extras.require(extras.Extra("x", "u", "l", ("json", "os.path")))  # present: nothing raised
    assert extras.missing(extras.Extra("x", "u", "l", ("json", "no_such_pkg.sub"))) == \
        "no_such_pkg.sub"


_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import diffcdc
failed = {}
for module in pkgutil.walk_packages(diffcdc.__path__, "diffcdc."):
    if module.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        failed[module.name] = exc.name
print(json.dumps(failed))
"""


@pytest.mark.slow
@pytest.mark.default_tier
def test_only_the_extras_own_modules_import_their_libraries(tmp_path):
    """Every other module of diffcdc imports without them, and none tries to."""
    done = run_blocked(tmp_path, [], main=_IMPORT_ALL)
    assert done.returncode == 0, done.stderr[-2000:]
    failed = json.loads(done.stdout)
    assert {m: n.split(".")[0] for m, n in failed.items()} == EXTRA_USERS
    assert done.loaded == []


@pytest.mark.slow
def test_a_landing_folder_run_needs_no_extra(tmp_path):
    write(str(tmp_path / "src" / "s1.parquet"), rows(5))
    done = run_blocked(tmp_path, run_args(tmp_path, "--quiet"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.ours == [] and done.loaded == []
    assert len(os.listdir(tmp_path / "landing" / "T")) >= 2  # _metadata.json and the data file


def _config(tmp_path, table_lines: str, top: str = 'state = "state"\n') -> str:
    (tmp_path / "src").mkdir(exist_ok=True)
    path = tmp_path / "diffcdc.toml"
    path.write_text(f'[diffcdc]\n{top}\n[tables.T]\nsource = "src"\n'
                    f'keys = ["id"]\n{table_lines}\n')
    return str(path)


_LOCAL = 'state = "state"\n'
_DELTA = '[[tables.T.sinks]]\ntype = "delta"\npath = "lake/t"\n'
_KAFKA = ('[[tables.T.sinks]]\ntype = "kafka"\nname = "events"\n'
          'bootstrap_servers = "127.0.0.1:9"\ntopic = "t"\n')
_POSTGRES = ('[[tables.T.sinks]]\ntype = "postgres"\nname = "pg"\n'
             'url = "jdbc:postgresql://127.0.0.1:9/db"\n')
_ADLS_LANDING = ('landing = "abfss://ws@onelake.dfs.fabric.microsoft.com/lh.Lakehouse/Files/'
                 'LandingZone"\n')
_GX = ('[tables.T.quality]\nexpectations = [{ type = "expect_column_values_to_not_be_null", '
       'kwargs = { column = "id" } }]\n')

MISSING = [
    pytest.param("delta", _DELTA, _LOCAL,
                 "table T, file {config}: sink delta: the Delta sink needs "
                 "the deltalake library (not installed) — pip install 'diffcdc[delta]'",
                 id="delta"),
    pytest.param("kafka", _KAFKA, _LOCAL,
                 "table T, file {config}: sink events: the Kafka sink needs "
                 "the confluent-kafka and fastavro libraries (not installed) — "
                 "pip install 'diffcdc[kafka]'", id="kafka"),
    pytest.param("postgres", _POSTGRES, _LOCAL,
                 "table T, file {config}: sink pg: the PostgreSQL sink needs "
                 "the psycopg library (version 3) (not installed) — "
                 "pip install 'diffcdc[postgres]'", id="postgres"),
    pytest.param("adls", _ADLS_LANDING, _LOCAL,
                 "table T, file {config}: sink open_mirroring landing: "
                 "a location on ADLS Gen2 / OneLake needs the Azure SDK's "
                 "azure-storage-file-datalake (not installed) — "
                 "pip install 'diffcdc[adls]'", id="adls-landing"),
    pytest.param("adls", 'landing = "landing"\n',
                 'state = "abfss://ws@onelake.dfs.fabric.microsoft.com/lh.Lakehouse/Files/state"\n'
                 'state_data = "state-data"\n',
                 "file {config}: state: a location on ADLS Gen2 / OneLake needs the Azure SDK's "
                 "azure-storage-file-datalake (not installed) — "
                 "pip install 'diffcdc[adls]'", id="adls-state"),
    pytest.param("gx", 'landing = "landing"\n' + _GX, _LOCAL,
                 "table T, file {config}: quality: "
                 "the quality gate's great-expectations part needs the great_expectations "
                 "library (not installed) — pip install 'diffcdc[gx]'", id="gx"),
]


@pytest.mark.slow
@pytest.mark.default_tier
@pytest.mark.parametrize(("extra", "table", "top", "expected"), MISSING)
def test_a_config_needing_a_missing_extra_is_refused_at_load(tmp_path, extra, table, top,
                                                             expected):
    config = _config(tmp_path, table, top)
    for command in (["run", "--config", config], ["status", "--config", config]):
        done = run_blocked(tmp_path, command, blocked=BLOCK[extra])
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.splitlines() == ["diffcdc: error: " + expected.format(config=config)]
        assert done.ours == [] and done.loaded == []  # found missing, nothing imported
    assert not (tmp_path / "state").exists()  # refused before anything ran


@pytest.mark.slow
@pytest.mark.default_tier
def test_a_command_line_option_needing_a_missing_extra_is_refused_too(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text("{}")
    done = run_blocked(tmp_path, run_args(tmp_path, "--expectation-suite", str(suite)),
                       blocked=BLOCK["gx"])
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    assert line.startswith("diffcdc: error: table T: quality: ") and \
        line.endswith("pip install 'diffcdc[gx]'")



def test_pyspark_3_5_without_pandas_is_one_line_naming_it(monkeypatch):
    """PySpark 3.5's Arrow exchange (mapInArrow) needs pandas, which left the core install
    (4.x's does not): a 3.5 without it stops at start, not deep inside a run."""
    from diffcdc.spark import version as spark_version

    monkeypatch.setattr(spark_version, "installed", lambda: "3.5.3")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    with pytest.raises(ConfigError) as caught:
        spark_version.require_pyspark()
    assert caught.value.exit_code == 2
    assert str(caught.value) == ('PySpark 3.5.3 needs pandas (for its Arrow exchange), which is '
                                 'not installed — pip install "pandas>=2,<3" (PySpark 3.5\'s own '
                                 'sql extra brings it)')
    monkeypatch.setattr(spark_version, "installed", lambda: "4.0.1")
    assert spark_version.require_pyspark() == "4.0.1"  # 4.x needs no pandas
