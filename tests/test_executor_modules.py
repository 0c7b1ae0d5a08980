"""The executors' import check asks for diffcdc's own modules and those of the sinks the run's
tables use, not of every sink type registered: a plug-in registered but used by no table (one
whose executor module a cluster lacks) cannot fail every table's run. No cluster needed: the
check's question is tested, and the probe a cluster runs is run here."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from diffcdc.config import TableConfig
from diffcdc.engine import executors
from diffcdc.engine.executors import _probe, check_executor_python, executor_check_modules
from diffcdc.errors import ConfigError
from diffcdc.sinks.plugin import Capabilities
from diffcdc.sinks.registry import executor_modules, registered_sink
from diffcdc.sources.plugin import SourceCapabilities, SourcePlugin
from diffcdc.sources.registry import registered_source
from tests.support.memory_sink import MemoryPlugin

LANDING = {"type": "open_mirroring", "landing": "/data/landing"}
INTEGRITY, STAGING = "diffcdc.state.integrity", "diffcdc.sinks.openmirroring.staging"
MISSING = "tests.support.not_on_the_executors"


class _Shipping(MemoryPlugin):
    """A memory sink whose Spark tasks would import a module the executors lack."""

    capabilities = Capabilities(executor_modules=(MISSING,))


class _ReaderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["remote_reader"] = "remote_reader"


class _RemoteReader(SourcePlugin):
    """A source type whose reads run a module of its own on the executors."""

    type = "remote_reader"
    config = _ReaderConfig
    capabilities = SourceCapabilities(executor_modules=("tests.support.reader_tasks",))

    @classmethod
    def build(cls, table: Any) -> Any:
        raise AssertionError("not read here")


def _table(name: str, *sinks: dict[str, Any]) -> TableConfig:
    return TableConfig(name=name, source=f"/data/{name}", keys=["id"], sinks=list(sinks))


def test_a_landing_table_asks_for_diffcdcs_own_modules_and_the_landing_sinks():
    assert executor_check_modules([_table("T", LANDING)]) == (INTEGRITY, STAGING)
    delta = _table("D", {"type": "delta", "path": "/data/lake"})
    assert executor_check_modules([delta]) == (INTEGRITY,)  # delta-rs: no Python task
    assert "diffcdc.sinks.kafka.stage" in executor_modules()  # known, but no table uses it


def test_a_registered_plugin_no_table_uses_is_not_asked_for():
    with registered_sink(_Shipping):
        assert MISSING in executor_modules()  # every known type's modules, as before
        landing = [_table("T", LANDING)]
        assert executor_check_modules(landing) == (INTEGRITY, STAGING)
        assert list(_probe(iter([executor_check_modules(landing)])))  # the probe passes
        both = [*landing, _table("M", {"type": "memory", "name": "m"}, LANDING)]
        assert executor_check_modules(both) == (INTEGRITY, STAGING, MISSING)  # each once
        with pytest.raises(ModuleNotFoundError, match=MISSING):
            list(_probe(iter([executor_check_modules(both)])))


def test_the_check_asks_the_executors_for_the_tables_modules(monkeypatch):
    asked: list[Any] = []
    monkeypatch.setattr(executors, "on_this_machine", lambda spark: False)
    monkeypatch.setattr(executors, "spark_label", lambda spark: "spark://cluster:7077")

    def on_executors(spark: Any, items: list[Any], probe: Any) -> list[str]:
        asked.extend(items)
        return list(probe(iter(items)))

    monkeypatch.setattr(executors, "on_executors", on_executors)
    with registered_sink(_Shipping):
        check_executor_python(object(), [_table("T", LANDING)])  # type: ignore[arg-type]
        assert asked == [(INTEGRITY, STAGING)]
        with pytest.raises(ConfigError) as refused:
            check_executor_python(object(), [_table("M", {"type": "memory", "name": "m"})])  # type: ignore[arg-type]
    assert asked[-1] == (INTEGRITY, MISSING)
    message = str(refused.value)
    assert "\n" not in message and refused.value.exit_code == 2
    assert "cannot run diffcdc's Python code" in message and "table(s) M" in message
    assert f"No module named '{MISSING}'" in message


def test_a_source_plugins_executor_modules_are_asked_for_the_tables_that_read_it():
    with registered_source(_RemoteReader):
        folder = _table("T", LANDING)
        reader = TableConfig(name="R", source={"type": "remote_reader"}, keys=["id"],
                             sinks=[LANDING])
        assert executor_check_modules([folder]) == (INTEGRITY, STAGING)
        assert executor_check_modules([folder, reader, reader]) == (
            INTEGRITY, STAGING, "tests.support.reader_tasks")
