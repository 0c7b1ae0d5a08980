"""A Delta log file's actions are split on newlines only: a value in a commit's statistics
may hold a character ``str.splitlines`` also splits on (found by the replay property test)."""

from __future__ import annotations

import json

import pytest

from diffcdc.sinks.delta.target_check import log_actions


@pytest.mark.parametrize("odd", ["\x85", "\u2028", "\u2029"])  # JSON escapes the others
def test_log_actions_keep_values_with_other_line_breaks(odd: str) -> None:
    actions = [{"commitInfo": {"operation": "MERGE"}},
               {"add": {"path": "part-0.parquet", "stats": json.dumps({"minValues": {"s": odd}}, ensure_ascii=False)}}]
    text = "\n".join(json.dumps(a, ensure_ascii=False) for a in actions) + "\n"
    assert odd in text  # as delta-rs writes it: the character itself, not an escape
    assert log_actions(text) == actions
