"""Sinks and sources as plug-ins: one registry names every type, and what the engine, status and
the config read of a sink comes from its plug-in."""

from __future__ import annotations

from typing import get_args

import pytest

from diffcdc.config import TableConfig
from diffcdc.sinks.openmirroring.shorthand import TABLE_LEVEL, headline
from diffcdc.sinks.registry import builtin_sinks, sink_plugin, sink_result, sink_status
from diffcdc.sources.registry import builtin_sources, source_kind
from tests.support.sink_kinds import KINDS

SINKS = builtin_sinks()
TABLE_SINK = sink_plugin(TABLE_LEVEL.type)
LANDING_MANIFEST = {"landing": "/lake/landing", "files": [{"name": "00000000000000000003.parquet"}],
                    "sequence": {"first": 3, "next": 4}, "rows": 5}


def test_every_registered_sink_has_its_type_a_model_and_a_contract_kind():
    types = [p.type for p in SINKS]
    assert len(types) == len(set(types))
    for plugin in SINKS:
        assert get_args(plugin.config.model_fields["type"].annotation) == (plugin.type,)
    assert {k.type for k in KINDS} == set(types)  # the contract runs over every sink type
    assert [p for p in SINKS if p.config is TABLE_LEVEL.config] == [TABLE_SINK]


def test_a_table_without_sinks_gets_one_table_level_sink_and_its_fields_are_defaults():
    flat = TableConfig(name="T", source="s", keys=["k"], landing="/l", codec="zstd")
    assert [s.type for s in flat.sinks] == [TABLE_SINK.type] and flat.sinks[0].codec == "zstd"
    both = TableConfig(name="T", source="s", keys=["k"], landing="/l", codec="zstd",
                       sinks=[{"type": "delta", "path": "/d"}, {"type": TABLE_SINK.type}])
    assert both.sinks[1].landing == "/l" and both.sinks[1].codec == "zstd"


def test_table_fields_given_on_the_command_line_change_only_the_sinks_that_take_them():
    table = TableConfig(name="T", source="s", keys=["k"],
                        sinks=[{"type": "delta", "path": "/d"},
                               {"type": "open_mirroring", "landing": "/l",
                                "landing_options": {"max_workers": 2}}])
    changed = table.with_table_fields(landing="/m").with_table_fields(
        landing_options={"retry_total": 3})
    assert changed.sinks[0] == table.sinks[0]
    assert changed.sinks[1].landing == "/m"
    assert changed.sinks[1].landing_options == {"max_workers": 2, "retry_total": 3}


def test_result_and_status_of_a_sink_come_from_its_plugin():
    assert sink_result("open_mirroring", LANDING_MANIFEST).files == ("00000000000000000003.parquet",)
    assert sink_result("open_mirroring", LANDING_MANIFEST).first_sequence == 3
    assert sink_result("delta", {"target": "/d"}).files == ()
    assert sink_status("open_mirroring", LANDING_MANIFEST) == {"target": "/lake/landing",
                                                               "next_sequence": 4}
    assert sink_status("delta", {"target": "/d"}) == {"target": "/d"}
    assert sink_status("from_a_newer_diffcdc", {"target": "x"}) == {"target": "x"}
    items = [{"type": "delta", "target": "/d"},
             {"type": "open_mirroring", "target": "/lake/landing", "next_sequence": 4}]
    found = headline(items)
    assert found is not None and (found.landing, found.next_sequence) == ("/lake/landing", 4)
    assert headline(items[:1]) is None


@pytest.mark.parametrize("value, kind", [
    ("snapshots/t", "folder"), ({"type": "jdbc"}, "jdbc"), ({"type": "dataframe"}, "dataframe"),
    ({"type": "folder"}, None), ({"type": "ftp"}, None), (3, None),
])
def test_a_source_setting_is_told_apart_by_the_registry(value, kind):
    assert source_kind(value) == kind
    assert {p.type for p in builtin_sources()} == {"folder", "jdbc", "dataframe"}
