"""Issue 40, sources that plug in like sinks: a package (here, this test) registers its own
source type with ``register_source`` / ``registered_source`` — no patching — and a table names
it by its ``type`` in a ``TableConfig`` or a config file; its snapshots run end to end into a
landing sink. A plug-in declared wrongly is refused in one line when it is registered, and an
unknown source type in a config is one line naming the known ones (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from diffcdc.config import RunConfig, TableConfig, check_secrets
from diffcdc.config_file import load_config
from diffcdc.engine.run import run_many
from diffcdc.errors import ConfigError, DiffcdcError, UsageError
from diffcdc.sinks.openmirroring.contract import table_folder
from diffcdc.sinks.openmirroring.replay import replay
from diffcdc.sources.base import PendingSnapshot, Snapshot, Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.sources.plugin import SourceCapabilities, SourcePlugin, SourceTable
from diffcdc.sources.registry import (
    build_source,
    register_source,
    registered_source,
    source_kind,
    source_plugin,
    source_plugins,
    unregister_source,
)
from diffcdc.spark.paths import spark_path
from diffcdc.storage.local import LocalStore
from tests.support.workspace import PERMISSIVE


class ArrowListConfig(BaseModel):
    """An ``arrow_list`` source: the in-memory list of snapshots called ``name``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["arrow_list"] = "arrow_list"
    name: str


class ArrowListSource(Source):
    """Snapshots from a list of (snapshot id, pyarrow table), read once into a copy."""

    materialized = True

    def __init__(self, snapshots: list[tuple[str, pa.Table]], name: str, table: str) -> None:
        self.snapshots, self.name, self.table = snapshots, name, table

    def describe(self) -> str:
        return f"arrow list {self.name}"

    def pending(self, committed: Sequence[str]) -> list[PendingSnapshot]:
        last = committed[-1] if committed else None
        return [PendingSnapshot(sid, self.describe()) for sid, _ in self.snapshots
                if last is None or sid > last]

    def read(self, spark: Any, pending: PendingSnapshot, copies: SnapshotCopies,
             after: str | None) -> Snapshot:
        sid = pending.snapshot_id
        assert sid is not None
        rows = dict(self.snapshots)[sid]
        path = copies.write(spark.createDataFrame(rows.to_pylist(), "id long, v string"), sid)
        return Snapshot(sid, self.describe(), spark.read.parquet(spark_path(spark, path)))


class ArrowList(SourcePlugin):
    """The ``arrow_list`` source type: its lists of snapshots live in :attr:`lists`."""

    type = "arrow_list"
    config = ArrowListConfig
    lists: ClassVar[dict[str, list[tuple[str, pa.Table]]]] = {}

    @classmethod
    def build(cls, table: SourceTable) -> Source:
        return ArrowListSource(cls.lists[table.source.name], table.source.name, table.name)


def _plugin(kind: str, **attributes: Any) -> type[SourcePlugin]:
    return type(f"Source_{len(kind)}", (ArrowList,), {"type": kind, **attributes})


def _snapshot(*rows: tuple[int, str]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "v": [r[1] for r in rows]})


def _mirror(landing: str) -> list[tuple[int, str]]:
    replayed = replay(LocalStore(landing), table_folder("T", None)).replayed()
    return sorted((row["id"], row["v"]) for row in replayed.rows)


def test_a_registered_source_runs_a_table_end_to_end_into_a_landing_sink(spark, tmp_path):
    landing, state = str(tmp_path / "landing"), str(tmp_path / "state")
    orders: list[tuple[str, pa.Table]] = [("0001", _snapshot((1, "a"), (2, "b"), (3, "c")))]
    with registered_source(_plugin("arrow_list", lists={"orders": orders})):
        config = RunConfig(state=state, quality=PERMISSIVE, tables=[TableConfig(
            name="T", source={"type": "arrow_list", "name": "orders"}, keys=["id"],
            landing=landing)])
        assert config.tables[0].source == ArrowListConfig(name="orders")
        (first,) = run_many(spark, config)
        assert first.error is None, first.error
        assert [(s.snapshot_id, s.inserted, s.updated, s.deleted) for s in first.snapshots] == [
            ("0001", 3, 0, 0)]
        assert _mirror(landing) == [(1, "a"), (2, "b"), (3, "c")]

        orders.append(("0002", _snapshot((1, "a"), (2, "B"), (4, "d"))))
        (steady,) = run_many(spark, config)
        assert steady.error is None, steady.error
        assert [(s.snapshot_id, s.version, s.inserted, s.updated, s.deleted, s.unchanged)
                for s in steady.snapshots] == [("0002", 2, 1, 1, 1, 1)]
        assert _mirror(landing) == [(1, "a"), (2, "B"), (4, "d")]

        (idle,) = run_many(spark, config)
        assert idle.error is None and idle.snapshots == []
    assert _mirror(landing) == [(1, "a"), (2, "B"), (4, "d")]


def test_a_registered_source_is_named_in_a_config_file_and_refused_once_unregistered(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nkeys = ['id']\nlanding = 'l'\n"
                    "[tables.T.source]\ntype = 'arrow_list'\nname = 'orders'\n")
    with registered_source(ArrowList):
        assert ArrowList in source_plugins() and source_kind({"type": "arrow_list"}) == "arrow_list"
        (table,) = load_config(str(path)).tables
        assert table.source == ArrowListConfig(name="orders")
        assert source_plugin(table.source) is ArrowList
        path.write_text(path.read_text().replace("name =", "nmae ="))
        with pytest.raises(ConfigError) as misspelt:
            load_config(str(path))
        assert "table T, field source.arrow_list.nmae: unknown field" in str(misspelt.value)
        path.write_text(path.read_text().replace("'arrow_list'", "'ftp'"))
        with pytest.raises(ConfigError) as unknown:
            load_config(str(path))
        assert ("table T, field source: unknown source type 'ftp'; give a folder path or "
                "type = one of 'jdbc', 'arrow_list'") in str(unknown.value)
        path.write_text(path.read_text().replace("'ftp'", "'arrow_list'"))
    assert ArrowList not in source_plugins() and source_kind({"type": "arrow_list"}) is None
    with pytest.raises(ConfigError) as refused:
        load_config(str(path))
    message = str(refused.value)
    assert "\n" not in message and refused.value.exit_code == 2
    assert ("table T, field source: unknown source type 'arrow_list'; give a folder path or "
            "type = one of 'jdbc'") in message
    with pytest.raises(ValidationError, match="unknown source type 'arrow_list'"):
        TableConfig(name="T", source={"type": "arrow_list", "name": "o"}, keys=["id"], landing="l")


def test_an_unknown_source_type_is_one_line_and_exit_2_from_the_command_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nkeys = ['id']\nlanding = 'l'\n"
                    "[tables.T.source]\ntype = 'arrow_list'\nname = 'orders'\n")
    done = subprocess.run([sys.executable, "-m", "diffcdc.cli", "plan", "--config", str(path)],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "table T, field source: unknown source type 'arrow_list'; give a folder path or " \
        "type = one of 'jdbc'" in done.stderr


def test_a_folder_source_validates_as_before_while_a_plugin_is_registered():
    with registered_source(ArrowList):
        table = TableConfig(name="T", source="/data/src", keys=["id"], landing="/l")
        assert table.source == "/data/src" and source_plugin(table.source).type == "folder"
        for value in (3, {"type": "folder", "path": "/x"}):
            with pytest.raises(ValidationError, match='must be a folder path or a table with '
                               'type = "jdbc" or "arrow_list"'):
                TableConfig(name="T", source=value, keys=["id"], landing="/l")


@pytest.mark.parametrize("kind", ["", " ", "my source", "a/b", "../x", "x\ny", "jdbc ", "ümlaut",
                                  "1st", "x" * 65])
def test_a_source_type_that_is_no_plain_name_is_refused(kind):
    with pytest.raises(UsageError, match="is not a plain name") as refused:
        register_source(_plugin(kind))
    assert "\n" not in str(refused.value).replace(repr(kind), "")
    assert kind not in {p.type for p in source_plugins()}


def test_a_builtin_source_type_cannot_be_replaced_nor_named_in_another_case():
    for kind in ("jdbc", "folder", "dataframe"):
        with pytest.raises(UsageError, match=f"source type '{kind}' is registered already"):
            register_source(_plugin(kind))
        unregister_source(kind)  # a built-in one stays
    assert source_plugin({"type": "jdbc"}).type == "jdbc"
    for kind, known in (("JDBC", "jdbc"), ("Folder", "folder")):
        with pytest.raises(UsageError, match=f"differs from the known type '{known}' only in case"):
            register_source(_plugin(kind))
    with registered_source(ArrowList), \
            pytest.raises(UsageError, match="'Arrow_List' differs from the known type 'arrow_list'"):
        register_source(_plugin("Arrow_List"))


def test_a_source_type_is_registered_once_and_a_block_leaves_an_earlier_registration():
    register_source(ArrowList)
    try:
        register_source(ArrowList)  # the same plug-in again: no harm
        with pytest.raises(UsageError, match="'arrow_list' is registered already"):
            register_source(_plugin("arrow_list"))
        with registered_source(ArrowList):
            pass
        assert ArrowList in source_plugins()  # registered before the block: still registered
    finally:
        unregister_source("arrow_list")
    assert ArrowList not in source_plugins()


def test_what_is_not_a_source_plugin_class_is_refused_in_one_line():
    for thing in ("arrow_list", ArrowList.__new__(ArrowList), 3, type("Sink", (), {})):
        with pytest.raises(UsageError, match="is not a class deriving from SourcePlugin"):
            register_source(thing)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="lacks its type, config or build"):
        register_source(type("Half", (SourcePlugin,), {"type": "half", "config": ArrowListConfig}))


def test_a_config_that_is_no_model_with_a_type_is_refused_at_registration():
    class Untyped(BaseModel):
        name: str

    for config, name in ((str, "str"), (dict, "dict"), (Untyped, "Untyped")):
        with pytest.raises(UsageError, match=f"its config {name} is not a pydantic model with a "
                           "type field"):
            register_source(_plugin("odd", config=config))
    assert "odd" not in {p.type for p in source_plugins()}


@pytest.mark.parametrize(("field", "value"), [
    ("capabilities", {"lists_waiting": True}), ("in_file", "yes"),
    ("capabilities.executor_modules", SourceCapabilities(executor_modules="tests.x")),  # type: ignore[arg-type]
    ("capabilities.executor_modules", SourceCapabilities(executor_modules=(3,))),  # type: ignore[arg-type]
])
def test_declarations_of_the_wrong_kind_are_refused(field, value):
    declared = {field.split(".")[0]: value}
    with pytest.raises(UsageError, match=f"source plug-in Source_3: {field} of the wrong kind"):
        register_source(_plugin("odd", **declared))
    assert "odd" not in {p.type for p in source_plugins()}


class _RaisingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["raising"] = "raising"

    @model_validator(mode="after")
    def _bug(self) -> _RaisingConfig:
        raise RuntimeError("a bug in the plug-in")


def test_a_plugins_config_model_that_raises_is_one_config_error_naming_the_source_type(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nkeys = ['id']\nlanding = 'l'\n"
                    "[tables.T.source]\ntype = 'raising'\n")
    with registered_source(_plugin("raising", config=_RaisingConfig)):
        for load in (lambda: load_config(str(path)),
                     lambda: TableConfig(name="T", source={"type": "raising"}, keys=["id"],
                                         landing="/l")):
            with pytest.raises(ConfigError) as refused:
                load()
            assert refused.value.exit_code == 2
            assert str(refused.value) == (
                "source type 'raising': the config model of its plug-in Source_7 failed: "
                "RuntimeError: a bug in the plug-in — fix the source plug-in, or check this "
                "source setting against it")


def test_a_plugin_whose_build_raises_is_named_with_its_table():
    def broken(cls, table):  # noqa: ANN001, ANN202
        raise KeyError("orders")

    with registered_source(_plugin("arrow_list", build=classmethod(broken))):
        table = TableConfig(name="T", source={"type": "arrow_list", "name": "orders"},
                            keys=["id"], landing="/l")
        with pytest.raises(DiffcdcError) as failed:
            build_source(table)
    assert failed.value.exit_code == 1 and isinstance(failed.value.__cause__, KeyError)
    assert str(failed.value) == (
        "source type 'arrow_list': its plug-in Source_10 failed to build the source of table T: "
        "KeyError: 'orders' — fix the source plug-in; run again with --debug for the full trace")


def test_source_capabilities_of_a_registered_plugin_are_what_status_asks():
    listing = _plugin("arrow_list", capabilities=SourceCapabilities(lists_waiting=True))
    with registered_source(listing):
        table = TableConfig(name="T", source={"type": "arrow_list", "name": "o"}, keys=["id"],
                            landing="/l")
        assert source_plugin(table.source).capabilities.lists_waiting
    assert not ArrowList.capabilities.lists_waiting


def test_a_plugin_whose_secrets_check_or_jars_raise_is_one_line_before_spark():
    def no_secrets(cls, config, table):  # noqa: ANN001, ANN202
        raise AttributeError("no attribute 'password_env'")

    def no_jars(cls, config):  # noqa: ANN001, ANN202
        raise TypeError("jars of what")

    buggy = _plugin("arrow_list", check_secrets=classmethod(no_secrets), jars=classmethod(no_jars))
    with registered_source(buggy):
        config = RunConfig(tables=[TableConfig(
            name="T", source={"type": "arrow_list", "name": "orders"}, keys=["id"], landing="/l")])
        with pytest.raises(DiffcdcError) as secrets:
            check_secrets(config.tables)
        with pytest.raises(DiffcdcError) as jars:
            config.jars()
    assert str(secrets.value) == (
        "source type 'arrow_list': its plug-in Source_10 failed to check the secrets of the "
        "source of table T: AttributeError: no attribute 'password_env' — fix the source "
        "plug-in; run again with --debug for the full trace")
    assert str(jars.value).startswith(
        "source type 'arrow_list': its plug-in Source_10 failed to give the jars of the source "
        "of table T: TypeError: jars of what")
    with registered_source(ArrowList):
        assert RunConfig(tables=[TableConfig(
            name="T", source={"type": "arrow_list", "name": "orders"}, keys=["id"],
            landing="/l")]).jars() == []


def test_a_type_that_is_no_text_is_refused_by_the_block_too():
    for kind in (["arrow_list"], None, 3):
        with pytest.raises(UsageError, match="lacks its type, config or build"), \
                registered_source(_plugin("x", type=kind)):
            pass
