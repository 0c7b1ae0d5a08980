"""Issue 40's sink plug-ins attacked as a third party would misuse them: each case ends in one
line naming the plug-in or the sink and the way out, never a traceback deep in a run, and a sink
that could never publish is refused before the run commits anything."""

from __future__ import annotations

import os
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel, ConfigDict, model_validator

from diffcdc.config import RunConfig, TableConfig
from diffcdc.engine.run import run_many
from diffcdc.errors import ConfigError, DiffcdcError, UsageError
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.registry import (
    build_sink,
    executor_modules,
    register_sink,
    registered_sink,
    sink_plugin,
    unregister_sink,
)
from diffcdc.sinks.table import SinkTable
from tests.support.memory_sink import MemoryPlugin, MemorySink, MemorySinkConfig, MemorySinks

TABLE = SinkTable("T", ("id",), None, ())


def _plugin(kind: str, **attributes: Any) -> type[SinkPlugin]:
    return type(f"Plugin_{len(kind)}", (MemoryPlugin,), {"type": kind, **attributes})


@pytest.mark.parametrize("kind", ["", " ", "my sink", "a/b", "../x", "x\ny", "delta ", "ümlaut",
                                  "1st", "x" * 65])
def test_a_sink_type_that_is_no_plain_name_is_refused(kind):
    with pytest.raises(UsageError, match="is not a plain name") as refused:
        register_sink(_plugin(kind))
    assert "\n" not in str(refused.value).replace(repr(kind), "")
    assert sink_plugin(kind) is None


@pytest.mark.parametrize("kind", ["my-sink", "acme.s3", "Bucket_2"])
def test_a_plain_sink_type_is_registered(kind):
    with registered_sink(_plugin(kind)) as plugin:
        assert sink_plugin(kind) is plugin
    assert sink_plugin(kind) is None


def test_a_sink_type_that_differs_from_a_known_one_only_in_case_is_refused():
    for kind, known in (("Delta", "delta"), ("OPEN_MIRRORING", "open_mirroring")):
        with pytest.raises(UsageError, match=f"differs from the known type '{known}' only in case"):
            register_sink(_plugin(kind))
        assert sink_plugin(kind) is None
    with registered_sink(_plugin("memory")), \
            pytest.raises(UsageError, match="'Memory' differs from the known type 'memory'"):
        register_sink(_plugin("Memory"))


def test_what_is_not_a_plugin_class_is_refused_in_one_line():
    for thing in ("memory", MemoryPlugin(), 3):
        with pytest.raises(UsageError, match="is not a class deriving from SinkPlugin"):
            register_sink(thing)  # type: ignore[arg-type]


def test_a_config_model_without_the_sinks_id_and_targets_is_refused_at_registration():
    class Bare(BaseModel):
        type: Literal["bare"] = "bare"
        name: str

    with pytest.raises(UsageError, match=r"its config Bare .* \(lacks sink_id, targets\)"):
        register_sink(_plugin("bare", config=Bare))
    with pytest.raises(UsageError, match="its config dict is not a pydantic model"):
        register_sink(_plugin("bare", config=dict))
    assert sink_plugin("bare") is None


@pytest.mark.parametrize(("field", "value"), [
    ("capabilities", {"drop": True}), ("extra", "delta"), ("path_fields", "path"),
    ("path_fields", ("path", 3)),
])
def test_declarations_of_the_wrong_kind_are_refused_and_break_no_other_run(field, value):
    with pytest.raises(UsageError, match=f"{field} of the wrong kind"):
        register_sink(_plugin("odd", **{field: value}))
    assert sink_plugin("odd") is None
    assert "diffcdc.sinks.openmirroring.staging" in executor_modules()  # every run asks this


class _RaisingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["raising"] = "raising"
    name: str

    @property
    def sink_id(self) -> str:
        return self.name

    def targets(self, table: str, schema_name: str | None = None) -> list[Any]:
        return []

    @model_validator(mode="after")
    def _bug(self) -> _RaisingConfig:
        raise RuntimeError("a bug in the plug-in")


def test_a_plugins_config_model_that_raises_is_one_config_error_naming_the_sink_type(tmp_path):
    (tmp_path / "src").mkdir()
    config = tmp_path / "c.toml"
    config.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
                      "[[tables.T.sinks]]\ntype = 'raising'\nname = 'r'\n")
    from diffcdc.config_file import load_config

    with registered_sink(_plugin("raising", config=_RaisingConfig)):
        for load in (lambda: load_config(str(config)),
                     lambda: TableConfig(name="T", source="/data/src", keys=["id"],
                                         sinks=[{"type": "raising", "name": "r"}])):
            with pytest.raises(ConfigError) as refused:
                load()
            assert refused.value.exit_code == 2
            assert str(refused.value) == (
                "sink type 'raising': the config model of its plug-in Plugin_7 failed: "
                "RuntimeError: a bug in the plug-in — fix the sink plug-in, or check this sink "
                "entry against it")


class _OldSink(MemorySink):
    """A sink written before publish took ``checked=``."""

    def publish(self, version, manifest, staging_dir, history):  # noqa: ANN001, ANN201
        return super().publish(version, manifest, staging_dir, history)


class _KwargsSink(MemorySink):
    def publish(self, version, manifest, staging_dir, history, **more):  # noqa: ANN001, ANN201
        return super().publish(version, manifest, staging_dir, history, **more)


def _building(sink_class: type[MemorySink]) -> Any:
    return classmethod(lambda cls, config, table, state: sink_class(
        config.sink_id, table, cls.targets[config.name], state))


def test_a_sink_whose_publish_does_not_take_checked_is_refused_when_built():
    with MemorySinks.registered() as sinks:
        sinks.add("m")
        sinks.plugin.build = _building(_OldSink)
        with pytest.raises(ConfigError) as refused:
            build_sink(MemorySinkConfig(name="m"), TABLE, state=None)  # type: ignore[arg-type]
        assert refused.value.exit_code == 2
        assert str(refused.value) == (
            "table T: sink m: _OldSink.publish does not take the keyword checked= that diffcdc "
            "passes (this run committed and published nothing) — update the sink plug-in: "
            "publish(version, manifest, staging_dir, history, *, checked=False) "
            "(see diffcdc.sinks.base)")
        sinks.plugin.build = _building(_KwargsSink)  # **kwargs takes it
        assert isinstance(build_sink(MemorySinkConfig(name="m"), TABLE, None),  # type: ignore[arg-type]
                          _KwargsSink)


def test_a_plugin_whose_build_raises_is_named_with_its_sink():
    def broken(cls, config, table, state):  # noqa: ANN001, ANN202
        raise KeyError("endpoint")

    with MemorySinks.registered() as sinks:
        sinks.plugin.build = classmethod(broken)
        with pytest.raises(DiffcdcError) as failed:
            build_sink(MemorySinkConfig(name="m"), TABLE, state=None)  # type: ignore[arg-type]
        assert failed.value.exit_code == 1 and isinstance(failed.value.__cause__, KeyError)
        assert str(failed.value) == (
            "table T: sink m: its plug-in TestMemoryPlugin failed to build it: KeyError: "
            "'endpoint' — check the sink's entry, or fix the plug-in; run again with --debug "
            "for the full trace")


def test_a_run_with_a_sink_that_cannot_take_checked_commits_nothing(spark, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"]}), source / "0001.parquet")
    with MemorySinks.registered() as sinks:
        good, old = sinks.add("good"), sinks.add("old")
        built = MemoryPlugin.build.__func__  # type: ignore[attr-defined]

        def build(cls, config, table, state):  # noqa: ANN001, ANN202
            if config.name == "old":
                return _OldSink(config.sink_id, table, cls.targets["old"], state)
            return built(cls, config, table, state)

        sinks.plugin.build = classmethod(build)
        table = sinks.table("T", str(source), ["id"], [good, old])
        (report,) = run_many(spark, RunConfig(state=str(tmp_path / "state"), tables=[table]))
    assert report.exit_code == 2 and report.error is not None
    assert report.error["message"].startswith("sink old: _OldSink.publish does not take")
    assert good.versions == old.versions == [] and good.calls == []
    assert not os.path.exists(tmp_path / "state" / "T" / "log")  # nothing committed


def test_a_plugin_that_cannot_read_a_committed_manifest_is_named_not_a_bare_key_error():
    """``diffcdc status`` of every table died with ``unexpected error: KeyError: 'rows_total'``
    (and a run, after publishing, with ``KeyError: 'files'``) when one plug-in's ``status`` or
    ``result`` failed on a manifest."""
    from diffcdc.sinks.registry import sink_result, sink_status

    def unreadable(cls, manifest):  # noqa: ANN001, ANN202
        raise KeyError("rows_total")

    plugin = _plugin("unreadable", status=classmethod(unreadable), result=classmethod(unreadable))
    with registered_sink(plugin):
        for ask, what in ((sink_status, "the status"), (sink_result, "the files")):
            with pytest.raises(DiffcdcError) as failed:
                ask("unreadable", {"file": "x"})
            assert str(failed.value) == (
                f"sink type 'unreadable': its plug-in Plugin_10 failed to give {what} of a "
                "committed version: KeyError: 'rows_total' — fix the sink plug-in; run again "
                "with --debug for the full trace")
            assert isinstance(failed.value.__cause__, KeyError)
    assert sink_status("unreadable", {"target": "t"}) == {"target": "t"}  # unknown: neutral


def test_a_block_registration_leaves_a_plugin_registered_before_registered():
    """``with registered_sink(P)`` of a plug-in its package had registered already unregistered
    it for good when the block ended."""
    plugin = _plugin("kept")
    register_sink(plugin)
    try:
        with registered_sink(plugin):
            assert sink_plugin("kept") is plugin
        assert sink_plugin("kept") is plugin
    finally:
        unregister_sink("kept")
    with registered_sink(plugin):
        pass
    assert sink_plugin("kept") is None


def test_a_plugin_whose_secrets_check_raises_is_named_with_its_sink_before_spark():
    """A plug-in's ``check_secrets`` bug surfaced as ``table T: KeyError: ...`` (no sink named)."""
    from diffcdc.config import check_secrets

    def broken(cls, config, table):  # noqa: ANN001, ANN202
        raise KeyError("password_env")

    with registered_sink(_plugin("memory", check_secrets=classmethod(broken))):
        table = TableConfig(name="T", source="/data/src", keys=["id"],
                            sinks=[{"type": "memory", "name": "vault"}])
        with pytest.raises(DiffcdcError) as failed:
            check_secrets([table])
    assert str(failed.value) == (
        "sink type 'memory': its plug-in Plugin_6 failed to check the secrets of sink vault "
        "of table T: KeyError: 'password_env' — fix the sink plug-in; run again with --debug "
        "for the full trace")
