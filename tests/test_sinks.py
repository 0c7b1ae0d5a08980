"""Several sinks per table: one commit, each sink published (and failing) on its own."""

from __future__ import annotations

import os

import pytest

from diffcdc.cli import main
from diffcdc.config_file import load_config
from diffcdc.engine.status import table_status
from diffcdc.engine.verify import verify_table
from diffcdc.errors import ConfigError, StorageError
from diffcdc.sinks.openmirroring.sink import OpenMirroringSink
from diffcdc.state.store import TableState
from tests.support.workspace import Workspace

TWO_SINKS = """
[diffcdc]
state = "state"

[quality]
max_delete_ratio = 1.0
min_row_ratio = 0.0

[tables.T]
source = "source"
keys = ["id"]
codec = "zstd"                 # a default for the table's open_mirroring sinks

[[tables.T.sinks]]
type = "open_mirroring"
name = "fabric"
landing = "landing-a"

[[tables.T.sinks]]
type = "open_mirroring"
name = "archive"
landing = "landing-b"
file_format = "csv"
"""


def _config(tmp_path, body: str = TWO_SINKS) -> str:
    path = tmp_path / "diffcdc.toml"
    path.write_text(body)
    return str(path)


def test_sinks_config_defaults_and_ids(tmp_path):
    config = load_config(_config(tmp_path))
    (table,) = config.tables
    a, b = table.sinks
    assert (a.sink_id, a.codec, a.landing) == ("fabric", "zstd", str(tmp_path / "landing-a"))
    assert (b.sink_id, b.file_format, b.codec) == ("archive", "csv", "zstd")
    twice = TWO_SINKS.replace('name = "archive"\n', 'name = "fabric"\n')
    with pytest.raises(ConfigError, match="sink ids repeat: \\['fabric'\\]"):
        load_config(_config(tmp_path, twice))
    unknown = TWO_SINKS.replace('type = "open_mirroring"\nname = "archive"', 'type = "ftp"\nname = "archive"')
    with pytest.raises(ConfigError, match="table T, sink 'archive': unknown sink type 'ftp'; give type = one of"):
        load_config(_config(tmp_path, unknown))


def _write(ws: Workspace, sid: str, ids: list[int], tag: str) -> None:
    ws.write(sid, [{"id": i, "v": f"{tag}{i}"} for i in ids])


def _verify_all(spark, config_path: str, sid: str) -> dict:
    config = load_config(config_path)
    (table,) = config.tables
    results = verify_table(spark, table, config.state, os.path.join(table.source, sid))
    return {k: r.identical for k, r in results.items()}


def test_one_commit_feeds_both_sinks_and_one_failure_stays_its_own(spark, tmp_path, monkeypatch):
    path = _config(tmp_path)
    ws = Workspace(str(tmp_path))
    _write(ws, "1.parquet", [1, 2, 3], "a")
    assert main(["run", "--config", path, "--quiet"]) == 0
    assert _verify_all(spark, path, "1.parquet") == {"fabric": True, "archive": True}
    # the archive sink fails while publishing version 2: fabric publishes, archive waits
    _write(ws, "2.parquet", [2, 3, 4], "b")
    real = OpenMirroringSink.publish

    def failing(self, version, manifest, staging_dir, history, **kwargs):
        if self.id == "archive":
            raise StorageError("the archive share is offline", hint="bring it back")
        return real(self, version, manifest, staging_dir, history, **kwargs)

    monkeypatch.setattr(OpenMirroringSink, "publish", failing)
    assert main(["run", "--config", path, "--quiet"]) == 1
    state = TableState(str(tmp_path / "state"), "T")
    assert state.head().version == 2 and state.head().unpublished == ["archive"]
    (status,) = table_status(str(tmp_path / "state"))
    assert {s["sink"]: s["published"] for s in status["sinks"]} == {"fabric": True, "archive": False}
    # a new snapshot does not wait for the archive: fabric publishes it, the archive still
    # fails (exit 1) and keeps both versions, in order, for when it is back
    _write(ws, "3.parquet", [3, 4, 5], "c")
    assert main(["run", "--config", path, "--quiet"]) == 1
    assert state.head().version == 3 and state.head().unpublished == ["archive"]
    assert verify_table(spark, load_config(path).tables[0], str(tmp_path / "state"),
                        os.path.join(ws.source, "3.parquet"), only="fabric")["fabric"].identical
    monkeypatch.setattr(OpenMirroringSink, "publish", real)
    assert main(["run", "--config", path, "--quiet"]) == 0
    assert state.head().version == 3 and all(c.published for c in state.commits())
    assert _verify_all(spark, path, "3.parquet") == {"fabric": True, "archive": True}
    for landing, ext in (("landing-a", "parquet"), ("landing-b", "csv")):
        names = sorted(n for n in os.listdir(tmp_path / landing / "T") if n[0].isdigit())
        assert names == [f"{n:020d}.{ext}" for n in (1, 2, 3)]  # nothing twice, nothing lost


def test_a_sink_added_later_starts_from_a_full_image(spark, tmp_path):
    one_sink = TWO_SINKS.split("[[tables.T.sinks]]\ntype = \"open_mirroring\"\nname = \"archive\"")[0]
    path = _config(tmp_path, one_sink)
    ws = Workspace(str(tmp_path))
    _write(ws, "1.parquet", [1, 2, 3], "a")
    _write(ws, "2.parquet", [2, 3, 4], "b")
    assert main(["run", "--config", path, "--quiet"]) == 0
    path = _config(tmp_path)  # the archive sink joins
    _write(ws, "3.parquet", [3, 4, 5], "c")
    assert main(["run", "--config", path, "--quiet"]) == 0
    head = TableState(str(tmp_path / "state"), "T").head()
    fabric, archive = head.record.sinks["fabric"].manifest, head.record.sinks["archive"].manifest
    assert (fabric["initial"], fabric["rows"], fabric["sequence"]) == (False, 4, {"first": 3, "next": 4})
    assert (archive["initial"], archive["rows"], archive["sequence"]) == (True, 3, {"first": 1, "next": 2})
    assert _verify_all(spark, path, "3.parquet") == {"fabric": True, "archive": True}
    # and from then on the archive continues with the diff
    _write(ws, "4.parquet", [4, 5], "c")
    assert main(["run", "--config", path, "--quiet"]) == 0
    head = TableState(str(tmp_path / "state"), "T").head()
    assert head.record.sinks["archive"].manifest["initial"] is False
    assert _verify_all(spark, path, "4.parquet") == {"fabric": True, "archive": True}
