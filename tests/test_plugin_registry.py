"""One plug-in shape per sink and per source: registration by API (no patching), declared
capabilities, built-in sinks loaded by module path without their client libraries, and the
source abilities ``status``, ``rollback`` and ``repair`` ask for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from diffcdc.errors import DiffcdcError, SourceError, UsageError
from diffcdc.sinks.plugin import Capabilities, SinkPlugin
from diffcdc.sinks.registry import (
    BUILTIN,
    build_sink,
    executor_modules,
    register_sink,
    registered_sink,
    sink_plugin,
    unregister_sink,
)
from diffcdc.sinks.table import SinkTable
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.sources.identity import identify, identity_record, same_files
from diffcdc.sources.registry import build_source, builtin_sources, source_plugin
from diffcdc.state.commit import CommitRecord
from tests.support.memory_sink import MemoryPlugin, MemorySinkConfig, MemorySinks

TABLE = SinkTable("T", ("id",), None, ())


class _Shipping(MemoryPlugin):
    type = "shipping"
    capabilities = Capabilities(executor_modules=("tests.support.memory_sink",))


def test_a_sink_type_registered_for_a_block_is_known_only_there():
    assert sink_plugin("shipping") is None
    with registered_sink(_Shipping) as plugin:
        assert sink_plugin("shipping") is plugin
        assert "tests.support.memory_sink" in executor_modules()
    assert sink_plugin("shipping") is None
    assert "tests.support.memory_sink" not in executor_modules()


def test_a_sink_type_is_registered_once_and_a_builtin_one_cannot_be_replaced():
    register_sink(_Shipping)
    try:
        register_sink(_Shipping)  # the same plug-in again: no harm
        with pytest.raises(UsageError, match="'shipping' is registered already"):
            register_sink(type("Other", (_Shipping,), {}))
    finally:
        unregister_sink("shipping")
    with pytest.raises(UsageError, match="'delta' is registered already"):
        register_sink(type("FakeDelta", (_Shipping,), {"type": "delta"}))
    unregister_sink("delta")  # a built-in one stays
    assert sink_plugin("delta") is not None


def test_a_plugin_without_type_config_or_build_is_refused():
    with pytest.raises(UsageError, match="lacks its type, config or build"):
        register_sink(type("Half", (SinkPlugin,), {"type": "half"}))


def test_the_memory_sink_is_built_through_the_registry():
    with MemorySinks.registered() as sinks:
        sinks.add("m")
        sink = build_sink(MemorySinkConfig(name="m"), TABLE, state=None)  # type: ignore[arg-type]
        assert sink.id == "m" and sink.target is sinks.targets["m"]
    with pytest.raises(DiffcdcError, match="unknown sink type 'memory'"):
        build_sink(MemorySinkConfig(name="m"), TABLE, state=None)  # type: ignore[arg-type]


def test_builtin_sinks_declare_their_library_extra_and_capabilities():
    delta, kafka, landing = (sink_plugin(t) for t in ("delta", "kafka", "open_mirroring"))
    assert delta is not None and kafka is not None and landing is not None
    assert delta.extra is not None and (delta.extra.name, delta.extra.modules) == ("delta", ("deltalake",))
    assert kafka.extra is not None and (kafka.extra.name, kafka.extra.modules) == (
        "kafka", ("confluent_kafka", "fastavro"))
    assert landing.extra is None and landing.capabilities.byte_store
    assert landing.capabilities.drop and landing.capabilities.target_checks
    assert not delta.capabilities.drop and not kafka.capabilities.target_checks
    assert set(executor_modules()) == {"diffcdc.sinks.openmirroring.staging",
                                       "diffcdc.sinks.kafka.stage", "diffcdc.sinks.postgres.copy"}
    assert set(BUILTIN) == {"open_mirroring", "delta", "kafka", "postgres"}
    postgres = sink_plugin("postgres")
    assert postgres is not None and postgres.extra is not None and (
        postgres.extra.name, postgres.extra.modules) == ("postgres", ("psycopg",))


def test_loading_the_config_imports_no_sink_library():
    code = ("import sys, diffcdc.config, diffcdc.config_file, diffcdc.sinks.registry as r\n"
            "[r.sink_plugin(t) for t in r.BUILTIN]\n"
            "print(sorted(m for m in ('deltalake', 'confluent_kafka', 'fastavro', 'psycopg', "
            "'pyspark')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.stdout.strip() == "[]"


def test_source_capabilities_tell_what_status_and_repair_may_ask():
    by_type = {p.type: p for p in builtin_sources()}
    assert by_type["folder"].capabilities.lists_waiting
    assert by_type["folder"].capabilities.reads_again
    for kind in ("jdbc", "dataframe"):
        assert not by_type[kind].capabilities.lists_waiting
        assert not by_type[kind].capabilities.reads_again
    assert source_plugin("/some/folder") is by_type["folder"]


class _Table:
    def __init__(self, source: str) -> None:
        self.name, self.source, self.csv_infer_schema = "T", source, False
        self.csv_encoding, self.snapshot_time = "utf-8", None


def test_a_folder_source_takes_committed_ids_and_proves_a_snapshot_by_its_identity(tmp_path):
    for name in ("1.csv", "2.csv", "3.csv"):
        (tmp_path / name).write_text("id\n1\n")
    source = build_source(_Table(str(tmp_path)))
    assert [p.snapshot_id for p in source.pending(["1.csv"])] == ["2.csv", "3.csv"]
    again = source.again("1.csv")
    assert again is not None
    recorded = identity_record(identify(again.path))
    assert source.proven(again, recorded) and same_files(again.path, recorded)
    assert not source.proven(again, None)
    os.replace(tmp_path / "3.csv", tmp_path / "1.csv")  # replaced: another inode
    assert not source.proven(again, recorded)


class _Once(Source):
    """A source of one snapshot that is gone once read (as a database's state)."""

    def pending(self, committed):  # noqa: ANN001, ANN201
        return [PendingSnapshot(None, "a database")]

    def read(self, spark, pending, copies, after):  # noqa: ANN001, ANN201
        return None

    def describe(self) -> str:
        return "a database"


def test_a_source_that_cannot_read_again_says_so_in_one_line():
    source = _Once()
    assert not source.proven(PendingSnapshot("1", "x"), [])
    with pytest.raises(SourceError, match="cannot be read again") as err:
        source.read_again(None, PendingSnapshot("1", "x"))  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_the_commit_keeps_a_snapshot_identity_as_written(tmp_path):
    (tmp_path / "1.csv").write_text("id\n1\n")
    recorded = identity_record(identify(str(tmp_path / "1.csv")))
    data = {"version": 1, "table": "T", "run_id": "r", "snapshot_id": "1.csv",
            "version_dir": "v1", "state_path": "v1/state", "keys": ["id"], "exclude": [],
            "schema": {}, "fingerprint": {"version": 1, "bits": 64},
            "counts": {"rows": 1, "inserted": 1, "updated": 0, "deleted": 0, "unchanged": 0},
            "snapshot_identity": list(recorded)}
    record = CommitRecord.from_dict(data)
    assert list(record.to_dict()["snapshot_identity"]) == list(recorded)
    assert same_files(str(tmp_path / "1.csv"), record.snapshot_identity)
