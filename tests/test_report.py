"""``diffcdc report``'s records from a real state (tests/data/history_487cccd: a Delta history
of three versions written by an earlier diffcdc), no Spark and no browser: each figure is
``status --json``'s or read from the state's own files, the changed columns as deltalake
counts them; the HTML holds no script and escapes what it shows."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections import Counter

import pyarrow as pa
from deltalake import DeltaTable

from diffcdc.cli.main import main
from diffcdc.report.read import read_report
from diffcdc.report.render import render_html
from diffcdc.state.root import StateRoot

DATA = os.path.join(os.path.dirname(__file__), "data", "history_487cccd")
CONFIG = """\
[diffcdc]
state = "state"
[tables.A]
source = "src/A"
keys = ["id"]
snapshot_time = "id:%Y-%m-%d"
[[tables.A.sinks]]
type = "delta"
name = "history"
path = "lake/history"
mode = "scd2"
"""


def _documents(folder) -> list[dict]:
    return [json.loads((folder / n).read_text()) for n in sorted(os.listdir(folder))
            if n.endswith(".json") and n.count(".") == 1]


def test_the_reports_records_are_status_figures_and_the_states_own(tmp_path, capsys,
                                                                   cli_logging):
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    config = tmp_path / "diffcdc.toml"
    config.write_text(CONFIG, encoding="utf-8")
    assert main(["status", "--config", str(config), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["tables"]
    output = tmp_path / "report.html"
    assert main(["report", "--config", str(config), "--output", str(output), "--quiet"]) == 0
    html = output.read_text(encoding="utf-8")
    assert "<script" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html

    report = read_report(StateRoot(str(tmp_path / "state")), [entry])
    (view,) = report.tables
    assert (view.table, view.version, view.rows, view.last_snapshot) == (
        entry["table"], entry["version"], entry["rows"], entry["last_snapshot"])
    for run, shown in ((entry["last_run"], view.last_run), (entry["last_change"],
                                                           view.last_change)):
        assert shown is not None
        assert (shown.outcome, shown.inserted, shown.updated, shown.deleted, shown.seconds) == (
            run["outcome"], run["inserted"], run["updated"], run["deleted"], run["seconds"])
    commits = _documents(tmp_path / "state" / "A" / "log")
    assert [(p.version, p.snapshot_id, p.inserted, p.updated, p.deleted, p.rows)
            for p in view.versions] == [
        (c["version"], c["snapshot_id"], c["counts"]["inserted"], c["counts"]["updated"],
         c["counts"]["deleted"], c["counts"]["rows"]) for c in commits]
    runs = _documents(tmp_path / "state" / "A" / "reports")
    assert [(r.run_id, r.seconds, r.versions) for r in view.runs] == [
        (r["run_id"], r["seconds"], tuple(s["version"] for s in r["snapshots"]))
        for r in reversed(runs)]
    (sink,) = view.sinks
    assert (sink.sink, sink.published, sink.published_version, sink.backlog) == (
        "history", True, entry["version"], ())

    history = pa.table(DeltaTable(str(tmp_path / "lake" / "history")).to_pyarrow_table())
    counted = Counter(c for row in history.column("__CHANGED_COLUMNS").to_pylist() if row
                      for c in row)
    (columns,) = view.columns
    assert columns.problem is None and counted
    assert {c.column: c.updates for c in columns.counts} == dict(counted)

    # --last 1: the head version, its run, the columns of the rows it wrote
    (newest,) = read_report(StateRoot(str(tmp_path / "state")), [entry], last=1).tables
    assert [p.version for p in newest.versions] == [entry["version"]]
    assert [r.run_id for r in newest.runs] == [runs[-1]["run_id"]]
    opened = [row for row, start in zip(history.column("__CHANGED_COLUMNS").to_pylist(),
                                        history.column("__START_AT").to_pylist())
              if row and start >= entry["version"]]
    assert {c.column: c.updates for c in newest.columns[0].counts} == dict(
        Counter(c for row in opened for c in row)) != dict(counted)

    # the sink's publish marks gone: every version its backlog, its table not read
    for mark in (tmp_path / "state" / "A" / "log").glob("*.published.*.json"):
        mark.unlink()
    (unpublished,) = read_report(StateRoot(str(tmp_path / "state")), [entry]).tables
    assert (unpublished.sinks[0].published_version, unpublished.sinks[0].backlog) == (
        None, tuple(c["version"] for c in commits))
    assert unpublished.columns[0].counts == () and unpublished.columns[0].problem is None

    hostile = dataclasses.replace(view, table='<script>alert("x")</script>', gate="<b>&")
    page = render_html(dataclasses.replace(report, tables=(hostile,)))
    assert "<script" not in page and "&lt;script&gt;" in page and "&lt;b&gt;&amp;" in page
