"""The Delta table id a Delta sink expects (issue 38, Delta part two): recorded when a version is
staged; state written before ids were recorded (or a full image that created the table) gives
none, so such a table is checked by its commits alone until its next version records one."""

from __future__ import annotations

from diffcdc.sinks.delta.target_check import table_id


def test_the_expected_table_id_is_the_newest_recorded_since_the_last_full_image():
    old_format = [(1, {"initial": True, "rows": 3}), (2, {"rows": 1})]
    assert table_id(old_format) is None
    assert table_id([(1, {"initial": True, "table_id": None})]) is None
    published = [(1, {"initial": True, "table_id": None}), (2, {"table_id": "x"}),
                 (3, {"table_id": None}), (4, {"table_id": "y"}), (5, {})]
    assert table_id(published) == "y"
    # a full image staged against a table (a reload) may find another there at its publish
    assert table_id([*published, (6, {"initial": True, "table_id": "y"})]) is None
    assert table_id([*published, (6, {"initial": True, "table_id": "y"}),
                                (7, {"table_id": "z"})]) == "z"
