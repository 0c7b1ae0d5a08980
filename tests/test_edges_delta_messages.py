"""Issue 38, the Delta sinks' messages: a path that is a file, delta-rs' colour codes, and a
hint that fits the cause of a failed Delta commit (no Spark: the unit tier)."""

from __future__ import annotations

import pytest

from diffcdc.errors import ConfigError
from diffcdc.sinks.base import SinkTable
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.delta.sink import DeltaSink


def _sink(path: str, **config) -> DeltaSink:
    return DeltaSink("delta", SinkTable("T", ("id",)), DeltaSinkConfig(path=path, **config))


def test_a_path_that_is_a_file_or_lies_under_one_is_named_as_such(tmp_path):
    regular = tmp_path / "orders"
    regular.write_text("not a table")
    for path, said in [(str(regular), "path is a file, not a Delta table folder"),
                       (str(regular / "t"), f"path lies under the file {regular}"),
                       (f"file://{regular}", "path is a file")]:
        with pytest.raises(ConfigError, match=said) as refused:
            _sink(path).target.open()
        assert refused.value.exit_code == 2 and "\n" not in str(refused.value)
        assert "Path does not exist" not in str(refused.value)
        assert "point the sink's path at a folder" in str(refused.value)
    log = _sink(str(tmp_path / "t"), changelog_path=str(regular))
    with pytest.raises(ConfigError, match="changelog_path is a file"):
        log.target.open(str(regular))
    assert _sink(str(tmp_path / "absent" / "t")).target.open() is None  # none yet: fine


def test_delta_rs_colour_codes_are_left_out_of_the_one_line_error(tmp_path):
    error = _sink(str(tmp_path / "t")).target.error(
        "Delta commit of version 3 failed: \x1b[1;31mGeneric error\x1b[0m:\n  \x1b[2mdetail\x1b[0m")
    text = str(error)
    assert "\x1b" not in text and "\n" not in text
    assert "Delta commit of version 3 failed: Generic error: detail" in text


@pytest.mark.parametrize(("cause", "hint"), [
    ("Generic LocalFileSystem error: Permission denied (os error 13)", "write access"),
    ("Failed to commit transaction: Read-only file system (os error 30)", "write access"),
    ("Object at location x not found: response status code: 403 AuthorizationFailure",
     "write access"),
    ("No space left on device (os error 28)", "free space"),
    ("Transaction failed: version already exists: 7", "committed to the table at the same"),
    ("Commit failed: a concurrent transaction deleted the same data", "at the same moment"),
    ("Schema error: Cannot cast column score from Float64 to Utf8", "do not take the version's"),
    ("Object at location part-0.parquet not found", "lost files diffcdc wrote"),
    ("The transaction includes Remove action with data change but Delta table is append-only",
     "set it back to false"),
    ("External error: Invalid data found: 1 rows failed validation check.\nPreview",
     "CHECK constraints"),
    ("something else", "check the path and its storage options"),
])
def test_a_failed_delta_commit_hints_at_its_cause(tmp_path, cause, hint):
    current = str(_sink(str(tmp_path / "t")).target.error(f"Delta commit of version 3 failed: {cause}"))
    assert hint in current and "\n" not in current
    if hint != "check the path and its storage options":
        assert "check the path and its storage options" not in current
    if "do not take" in hint:
        assert "diffcdc reload --table T --sink delta --yes" in current
        history = str(_sink(str(tmp_path / "h"), mode="scd2").target.error(cause))
        assert "RESTORE the Delta table" in history and "start a new history" in history
