"""Issue 40 item 1, the folder checks behind the source plug-in: the config asks a table's
source plug-in what it declares — the folder it reads (``SourcePlugin.folder``), whether the
table's ``snapshot_time`` rule applies (``SourceCapabilities.snapshot_times``), how a source
not in a file is handed over (``run_with``), which of its fields are paths (``path_fields``) —
never whether the ``source`` is a string, so a third-party source reading a folder gets the
checks a folder source gets, in the same words."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from diffcdc.config import RunConfig, TableConfig
from diffcdc.config_file import load_config
from diffcdc.errors import ConfigError, DiffcdcError, UsageError
from diffcdc.sources.base import Source
from diffcdc.sources.plugin import SourceCapabilities, SourcePlugin, SourceTable
from diffcdc.sources.registry import (
    register_source,
    registered_source,
    source_folder,
    source_plugin,
)


class DropConfig(BaseModel):
    """A ``drop_folder`` source: the snapshots a partner drops into ``path``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["drop_folder"] = "drop_folder"
    path: str
    label: str = "partner"


class DropFolder(SourcePlugin):
    """A third-party source that reads a folder, its snapshots timed by the table's rule."""

    type = "drop_folder"
    config = DropConfig
    path_fields = ("path",)
    capabilities = SourceCapabilities(snapshot_times=True)

    @classmethod
    def build(cls, table: SourceTable) -> Source:
        raise AssertionError("no run reads it here")

    @classmethod
    def folder(cls, config: DropConfig) -> str:
        return config.path


def _plugin(kind: str, base: type[SourcePlugin] = DropFolder, **attributes: Any
            ) -> type[SourcePlugin]:
    config = type(f"{kind}_config", (DropConfig,), {"__annotations__": {"type": Literal[kind]},
                                                    "type": kind})
    return type(f"Plugin_{kind}", (base,), {"type": kind, "config": config, **attributes})


def _error(make: Any) -> str:
    with pytest.raises((ValidationError, ConfigError)) as err:
        make()
    return str(err.value)


def test_a_sink_inside_a_plugin_sources_folder_is_refused_as_inside_a_folder_source(tmp_path):
    src = str(tmp_path / "src")
    with registered_source(DropFolder):
        plugin = _error(lambda: TableConfig(name="T", keys=["id"], landing=f"{src}/out",
                                            source={"type": "drop_folder", "path": src}))
        TableConfig(name="T", keys=["id"], landing=f"{src}x",
                    source={"type": "drop_folder", "path": src})  # side by side: fine
    folder = _error(lambda: TableConfig(name="T", keys=["id"], landing=f"{src}/out", source=src))
    words = (f"table 'T' sink 'open_mirroring' (landing) writes to {src}/out, which lies inside the "
             f"table's source folder {src}: what the sink writes would be read as a snapshot")
    assert words in plugin and words in folder


def test_another_tables_sink_or_the_state_root_in_a_plugin_sources_folder_is_refused(tmp_path):
    src = str(tmp_path / "src")
    with registered_source(DropFolder):
        reader = TableConfig(name="B", keys=["id"], landing=str(tmp_path / "b"),
                             source={"type": "drop_folder", "path": src})
        writer = TableConfig(name="A", keys=["id"], landing=f"{src}/zone",
                             source=str(tmp_path / "a"))
        across = _error(lambda: RunConfig(state=str(tmp_path / "state"), tables=[writer, reader]))
        assert (f"table 'A' sink 'open_mirroring' (landing) writes to {src}/zone, which lies inside "
                f"the source folder of table 'B' {src}: what the sink writes would be read as "
                "that table's snapshots") in across
        state = _error(lambda: RunConfig(state=f"{src}/state", tables=[reader]))
        assert (f"table 'B' reads its snapshots from {src}, which is, lies inside or holds the "
                f"state root {src}/state") in state
        RunConfig(state=str(tmp_path / "state"), tables=[reader])


def test_a_source_without_a_folder_is_not_compared_with_the_sinks(tmp_path):
    src = str(tmp_path / "src")
    nowhere = _plugin("nowhere", folder=classmethod(lambda cls, config: None))
    with registered_source(nowhere):
        table = TableConfig(name="T", keys=["id"], landing=f"{src}/out",
                            source={"type": "nowhere", "path": src})
        assert source_folder(table) is None
        RunConfig(state=f"{src}/state", tables=[table])


def test_snapshot_time_is_taken_by_a_source_that_declares_snapshot_times_only(tmp_path):
    untimed = _plugin("untimed", capabilities=SourceCapabilities())
    with registered_source(DropFolder), registered_source(untimed):
        timed = TableConfig(name="T", keys=["id"], landing=str(tmp_path / "l"),
                            snapshot_time="id:%Y%m%d",
                            source={"type": "drop_folder", "path": str(tmp_path / "s")})
        assert timed.snapshot_time == "id:%Y%m%d"
        refused = _error(lambda: TableConfig(
            name="T", keys=["id"], landing=str(tmp_path / "l"), snapshot_time="mtime",
            source={"type": "untimed", "path": str(tmp_path / "s")}))
    assert ("snapshot_time is a rule for folder snapshots: a JDBC read's time is its start, "
            "a DataFrame's is run_dataframe(snapshot_time=...)") in refused
    assert source_plugin(str(tmp_path)).capabilities.snapshot_times
    assert not source_plugin({"type": "dataframe"}).capabilities.snapshot_times


def _config(tmp_path: Any, source: str) -> str:
    path = tmp_path / "conf" / "c.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nkeys = ['id']\nlanding = 'l'\n"
                    f"[tables.T.source]\n{source}\n")
    return str(path)


def test_a_plugin_source_not_in_a_file_names_how_it_is_handed_over(tmp_path):
    path = _config(tmp_path, "type = 'from_queue'\npath = 'q'\n")
    queue = _plugin("from_queue", in_file=False, run_with="acme.diffcdc.run_queue(queue, ...)")
    with registered_source(queue):
        with pytest.raises(ConfigError) as err:
            load_config(path)
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert ("table T: a from_queue source is handed over in Python "
            "(acme.diffcdc.run_queue(queue, ...)), not configured in a file") in str(err.value)
    assert "run_dataframe" not in str(err.value)
    with pytest.raises(ConfigError) as builtin:
        load_config(_config(tmp_path, "type = 'dataframe'\n"))
    assert ("table T: a dataframe source is handed over in Python (diffcdc.run_dataframe), "
            "not configured in a file") in str(builtin.value)


def test_a_plugin_sources_path_fields_are_relative_to_the_config_file(tmp_path):
    with registered_source(DropFolder):
        (table,) = load_config(_config(tmp_path, "type = 'drop_folder'\npath = '../drops'\n"
                                                 "label = 'rel/not/a/path'\n")).tables
        assert table.source == DropConfig(path=str(tmp_path / "drops"), label="rel/not/a/path")
        for kept in (str(tmp_path / "abs"), "abfss://c@a.dfs.core.windows.net/drops"):
            (table,) = load_config(_config(tmp_path, f"type = 'drop_folder'\npath = '{kept}'\n"
                                                     "label = 'x'\n")).tables
            assert table.source.path == kept
    folder_file = tmp_path / "conf" / "f.toml"
    folder_file.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nsource = '../src'\n"
                           "keys = ['id']\nlanding = 'l'\n")
    (folder,) = load_config(str(folder_file)).tables
    assert folder.source == str(tmp_path / "src")


@pytest.mark.parametrize(("attributes", "wrong"), [
    ({"path_fields": ("nope",)}, "path_fields"),
    ({"path_fields": "path"}, "path_fields"),
    ({"run_with": None}, "run_with"),
    ({"capabilities": SourceCapabilities(snapshot_times="yes")}, "capabilities.snapshot_times"),
])
def test_a_plugin_declaring_them_wrongly_is_refused_when_registered(attributes, wrong):
    with pytest.raises(UsageError) as err:
        register_source(_plugin("badly", **attributes))
    message = str(err.value)
    assert "\n" not in message
    assert f"source plug-in Plugin_badly: {wrong} of the wrong kind" in message


@pytest.mark.parametrize(("folder", "words"), [
    (lambda cls, config: 1 / 0, "failed to give the folder of the source of table T: "
                                "ZeroDivisionError: division by zero"),
    (lambda cls, config: ["x"], "gave list ['x'] as the folder of the source of table T, not a "
                                "path or None"),
])
def test_a_plugins_broken_folder_answer_is_one_line_naming_it_and_the_table(tmp_path, folder,
                                                                             words):
    with registered_source(_plugin("broken", folder=classmethod(folder))):
        with pytest.raises(DiffcdcError) as err:
            TableConfig(name="T", keys=["id"], landing=str(tmp_path / "l"),
                        source={"type": "broken", "path": str(tmp_path / "s")})
    message = str(err.value)
    assert "\n" not in message and "source type 'broken'" in message and words in message
