"""Issue 40, a registered sink type in a config: a sink entry validates against the sink types
registered when it is validated, so a plug-in another package (or a test) registers is named by
its ``type`` in a ``TableConfig`` and in a config file like a built-in one, and refused with the
known types listed once it is unregistered."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from diffcdc.config import TableConfig
from diffcdc.config_file import load_config
from diffcdc.errors import ConfigError
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.registry import build_sink, plugin_of, registered_sink, sink_plugins
from diffcdc.sinks.table import SinkTable
from diffcdc.state.store import TableState
from tests.support.memory_sink import MemorySink, MemorySinkConfig, MemorySinks, MemoryTarget

BUILTIN_TYPES = "give type = one of 'open_mirroring', 'delta', 'kafka', 'postgres'"


class BucketConfig(BaseModel):
    """A ``bucket`` sink: a folder (``path``, relative to the config file)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["bucket"] = "bucket"
    name: str = "bucket"
    path: str

    @property
    def sink_id(self) -> str:
        return self.name

    def targets(self, table: str, schema_name: str | None = None) -> list[Any]:
        return []


class Bucket(SinkPlugin):
    """The ``bucket`` sink type: its sink publishes into a memory target named for the entry."""

    type = "bucket"
    config = BucketConfig
    path_fields = ("path",)

    @classmethod
    def build(cls, config: BucketConfig, table: SinkTable, state: TableState) -> MemorySink:
        return MemorySink(config.sink_id, table, MemoryTarget(config.path), state)


def table(sinks: list[Any]) -> TableConfig:
    return TableConfig.model_validate({"name": "T", "source": "/data/src", "keys": ["id"],
                                       "sinks": sinks})


@pytest.fixture
def config_file(tmp_path):
    (tmp_path / "src").mkdir()
    path = tmp_path / "c.toml"
    path.write_text("[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"
                    "[[tables.T.sinks]]\ntype = 'bucket'\nname = 'b'\npath = 'out'\n")
    return path


def test_a_registered_sink_type_is_a_table_configs_sink():
    with registered_sink(Bucket):
        config = table([{"type": "bucket", "path": "/data/out"},
                        {"type": "delta", "path": "/data/lake"}])
        bucket, delta = config.sinks
        assert isinstance(bucket, BucketConfig) and bucket.path == "/data/out"
        assert isinstance(delta, DeltaSinkConfig) and plugin_of(bucket) is Bucket
        sink = build_sink(bucket, config.sink_table(), state=None)  # type: ignore[arg-type]
        assert isinstance(sink, MemorySink) and sink.id == "bucket"
        assert sink.target.name == "/data/out"
        assert TableConfig(name="T", source="/data/src", keys=["id"],
                           sinks=[{"type": "bucket", "path": "/p"}]).sinks[0] == BucketConfig(path="/p")
        with pytest.raises(ValidationError) as missing:
            table([{"type": "bucket", "name": "b"}])
    assert [(e["type"], e["loc"]) for e in missing.value.errors()] == [
        ("missing", ("sinks", 0, "bucket", "path"))]


def test_a_registered_sink_type_is_named_in_a_config_file(config_file, tmp_path):
    with registered_sink(Bucket):
        assert Bucket in sink_plugins()
        config = load_config(str(config_file))
        assert config.tables[0].sinks == [BucketConfig(name="b", path=str(tmp_path / "out"))]
        config_file.write_text(config_file.read_text().replace("path =", "paht ="))
        with pytest.raises(ConfigError) as misspelt:
            load_config(str(config_file))
    message = str(misspelt.value)
    assert "table T, field sinks.0.bucket.paht: unknown field (did you mean 'path'?)" in message
    assert "table T, field sinks.0.bucket.path: required, not given" in message


def test_an_unregistered_sink_type_is_refused_on_one_line(config_file):
    with registered_sink(Bucket):
        load_config(str(config_file))
    assert Bucket not in sink_plugins()
    with pytest.raises(ConfigError) as refused:
        load_config(str(config_file))
    message = str(refused.value)
    assert "\n" not in message and refused.value.exit_code == 2
    assert f"table T, sink 'b': unknown sink type 'bucket'; {BUILTIN_TYPES}" in message
    with pytest.raises(ValidationError) as direct:
        table([{"type": "bucket", "path": "/data/out"}])
    assert [(e["type"], e["ctx"]["tag"]) for e in direct.value.errors()] == [
        ("union_tag_invalid", "bucket")]


def test_an_unknown_type_lists_the_registered_ones_too(config_file):
    config_file.write_text(config_file.read_text().replace("'bucket'", "'ftp'"))
    with registered_sink(Bucket), pytest.raises(ConfigError) as refused:
        load_config(str(config_file))
    assert f"unknown sink type 'ftp'; {BUILTIN_TYPES}, 'bucket'" in str(refused.value)


def test_a_builtin_sink_type_validates_as_before(config_file, tmp_path):
    config_file.write_text(config_file.read_text().replace(
        "type = 'bucket'", "type = 'delta'"))
    with registered_sink(Bucket):
        during = load_config(str(config_file)).tables[0].sinks
    after = load_config(str(config_file)).tables[0].sinks
    assert during == after == [DeltaSinkConfig(name="b", path=str(tmp_path / "out"))]
    with pytest.raises(ValidationError) as wrong:
        table([{"type": "delta", "path": 3}])
    assert [(e["type"], e["loc"]) for e in wrong.value.errors()] == [
        ("string_type", ("sinks", 0, "delta", "path"))]


def test_the_memory_sink_is_named_by_its_type_while_registered():
    with MemorySinks.registered() as sinks:
        config = sinks.table("T", "/data/src", ["id"],
                             [sinks.add("m"), {"type": "delta", "path": "/data/lake"}])
        memory, delta = config.sinks
        assert memory == MemorySinkConfig(name="m") and isinstance(delta, DeltaSinkConfig)
        assert table([{"type": "memory", "name": "n"}]).sinks == [MemorySinkConfig(name="n")]
    with pytest.raises(ValidationError, match="'memory'"):
        table([{"type": "memory", "name": "n"}])
