"""Scoped snapshots through ``diffcdc run`` (docs/scope.md): each refusal in one line with its
exit code and nothing published; the gate's delete ratio within the scope; status, verify and
the run's output with kept keys; a sink that needs a full image while keys are kept."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.state.store import TableState
from tests.support.cli_runs import write


def _config(base, scope: str, *, quality: str = "min_row_ratio = 0.0\nmax_delete_ratio = 1.0\n",
            sinks: str = "") -> str:
    path = str(base / "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            f"[diffcdc]\nstate = {json.dumps(str(base / 'state'))}\n\n[quality]\n{quality}\n"
            f"[tables.T]\nsource = {json.dumps(str(base / 'src'))}\nkeys = [\"id\"]\n"
            f"landing = {json.dumps(str(base / 'landing'))}\n{sinks}\n[tables.T.scope]\n{scope}\n")
    return path


def _rows(*specs):
    return [{"id": i, "region": r, "n": n, "v": v} for i, r, n, v in specs]


FIRST = _rows((1, "eu", 1, "a"), (2, "eu", 2, "b"), (3, "us", 3, "c"), (4, "us", 4, "d"),
              (5, None, 5, "e"))


def _published(base) -> tuple[int | None, list[str]]:
    """The head version and every file under the landing zone (what a consumer sees)."""
    state = TableState(str(base / "state"), "T")
    head = state.head() if os.path.isdir(base / "state" / "T") else None
    found = sorted(os.path.relpath(os.path.join(w, f), base / "landing")
                   for w, _, files in os.walk(base / "landing") for f in files)
    return (head.version if head else None), found


def _refused(base, capsys, path: str, code: int, *words: str) -> None:
    before = _published(base)
    capsys.readouterr()
    assert main(["run", "--config", path, "--quiet"]) == code
    err = capsys.readouterr().err.strip()
    # one line: "diffcdc: error: ..." for a config error, the run's timed line for a refusal
    assert len(err.splitlines()) == 1, err
    assert "table T" in err and all(w in err for w in words), err
    assert _published(base) == before  # nothing committed, nothing published


@pytest.fixture
def first(spark, tmp_path, capsys):
    """Table T scoped by region, its first snapshot committed and published."""
    path = _config(tmp_path, 'columns = ["region"]')
    write(str(tmp_path / "src" / "1.parquet"), FIRST)
    assert main(["run", "--config", path, "--quiet"]) == 0
    capsys.readouterr()
    return tmp_path, path


def test_each_refusal_is_one_line_with_its_exit_code_and_nothing_published(first, capsys):
    base, path = first
    # a scope column missing from the snapshot: exit 3
    write(str(base / "src" / "2.parquet"), [{"id": 1, "v": "a"}])
    _refused(base, capsys, path, 3, "scope column(s) region are not in the snapshot", "2.parquet")
    # a scoped snapshot with no rows: exit 3
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "region": pa.array([], pa.string()),
                             "n": pa.array([], pa.int64()), "v": pa.array([], pa.string())}),
                   base / "src" / "2.parquet")
    _refused(base, capsys, path, 3, "scoped snapshot has no rows", "2.parquet")
    write(str(base / "src" / "2.parquet"), _rows((1, "eu", 1, "a")))
    # a predicate that does not parse: exit 2, before the snapshot is read
    _refused(base, capsys, _config(base, 'where = "n >>> ("'), 2, "does not parse", "n >>> (")
    # a predicate over no column of the snapshot, over an unknown one: exit 2
    _refused(base, capsys, _config(base, 'where = "1 = 1"'), 2, "names no column")
    _refused(base, capsys, _config(base, 'where = "n > 0 AND nope = 1"'), 2,
             "cannot be evaluated", "nope")
    # a predicate that is not boolean: exit 2
    _refused(base, capsys, _config(base, 'where = "n + 1"'), 2, "not a boolean")
    # no snapshot row inside the predicate: exit 3
    _refused(base, capsys, _config(base, 'where = "n > 100"'), 3, "no row of the snapshot",
             "scope is empty")
    # and the table goes on once the config is right
    assert main(["run", "--config", _config(base, 'columns = ["region"]'), "--quiet"]) == 0
    assert TableState(str(base / "state"), "T").head().record.counts.kept == 3


def test_kept_keys_show_in_the_runs_output_status_and_verify(first, capsys):
    base, path = first
    write(str(base / "src" / "2.parquet"), _rows((1, "eu", 1, "a")))
    assert main(["run", "--config", path]) == 0
    out = capsys.readouterr().out
    assert "+0 ~0 -1 (3 kept outside a snapshot's scope)" in out, out
    assert main(["status", "--config", path, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["tables"]
    assert entry["kept"] == 3 and entry["scope"]["columns"] == ["region"]
    assert entry["rows"] == 1
    assert main(["verify", "--config", path, "--table", "T", "--snapshot",
                 str(base / "src" / "2.parquet")]) == 0
    assert "and the 3 keys kept outside its scope" in capsys.readouterr().out
    assert main(["verify", "--config", path, "--state"]) == 0
    capsys.readouterr()
    # snapshot 1 against the sink: key 2 was deleted (in scope), so the sink differs
    assert main(["verify", "--config", path, "--table", "T", "--snapshot",
                 str(base / "src" / "1.parquet")]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_the_delete_ratio_counts_within_the_scope(spark, tmp_path, capsys):
    """10 keys, 5 in eu: a snapshot of eu without one of them deletes 1 of 5 (0.2), not 1 of
    10 (0.1): refused at max_delete_ratio 0.15, passed at 0.25."""
    rows = [(i, "eu" if i < 5 else "us", i, "x") for i in range(10)]
    path = _config(tmp_path, 'columns = ["region"]',
                   quality="min_row_ratio = 0.0\nmax_delete_ratio = 0.15\nmin_rows_for_ratios = 1\n")
    write(str(tmp_path / "src" / "1.parquet"), _rows(*rows))
    assert main(["run", "--config", path, "--quiet"]) == 0
    write(str(tmp_path / "src" / "2.parquet"), _rows(*rows[:4]))
    _refused(tmp_path, capsys, path, 3, "delete_ratio")
    path = _config(tmp_path, 'columns = ["region"]',
                   quality="min_row_ratio = 0.0\nmax_delete_ratio = 0.25\nmin_rows_for_ratios = 1\n")
    assert main(["run", "--config", path, "--quiet"]) == 0
    counts = TableState(str(tmp_path / "state"), "T").head().record.counts
    assert (counts.deleted, counts.kept, counts.unchanged) == (1, 5, 4)


def test_a_sink_added_while_keys_are_kept_is_refused_a_partial_image(first, capsys):
    base, path = first
    write(str(base / "src" / "2.parquet"), _rows((1, "eu", 1, "a")))
    assert main(["run", "--config", path, "--quiet"]) == 0
    delta = f'[[tables.T.sinks]]\ntype = "delta"\nname = "lake"\npath = {json.dumps(str(base / "lake"))}\n'
    landing = '[[tables.T.sinks]]\ntype = "open_mirroring"\n'
    added = _config(base, 'columns = ["region"]', sinks=landing + "\n" + delta)
    write(str(base / "src" / "3.parquet"), _rows((1, "eu", 1, "b")))
    _refused(base, capsys, added, 3, "sink(s) lake need a full image", "3 keys outside")
    assert not os.path.exists(base / "lake")
