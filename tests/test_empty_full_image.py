"""A full image of an EMPTY snapshot empties every sink's target (a reload, a re-creation by a
schema change under schema_policy = "recreate"): before, the Delta sink (both modes) made no
commit for it and kept its old rows while the version was recorded as published. Read with
independent readers: deltalake for Delta (the history as of every version), ``verify`` for
the landing folder."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.state.store import TableState
from tests.support.history import as_of, canonical, check_history, history_rows
from tests.support.sink_kinds import KINDS

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("u", pa.int64())])
NARROWER = pa.schema([("id", pa.int64()), ("v", pa.string())])  # u removed


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    (tmp_path / "diffcdc.toml").write_text(
        "[diffcdc]\nstate = 'state'\n[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\nallow_empty = true\n"
        "[tables.T]\nsource = 'src'\nkeys = ['id']\nsnapshot_time = 'id:%Y-%m-%d'\n"
        "schema_policy = 'recreate'\n"
        "[[tables.T.sinks]]\ntype = 'open_mirroring'\nname = 'landing'\nlanding = 'landing'\n"
        "[[tables.T.sinks]]\ntype = 'delta'\nname = 'current'\npath = 'lake/c'\n"
        "[[tables.T.sinks]]\ntype = 'delta'\nname = 'history'\npath = 'lake/h'\n"
        "mode = 'scd2'\n")
    return tmp_path


def _write(base, day: str, rows: list[dict], schema: pa.Schema = SCHEMA) -> str:
    path = str(base / "src" / f"{day}.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema), path)
    return path


def _run(*args: str) -> int:
    return main([*args, "--config", "diffcdc.toml", "--quiet"])


def _check_sinks(base, snapshot: str) -> None:
    """Every sink is exactly ``snapshot``; the history as of each version is its snapshot."""
    from deltalake import DeltaTable

    expected = pq.read_table(snapshot).to_pylist()
    current = DeltaTable(str(base / "lake" / "c")).to_pyarrow_table().to_pylist()
    assert canonical(current) == canonical(expected)
    rows = history_rows(str(base / "lake" / "h"))
    check_history(rows, ["id"])
    for commit in TableState(str(base / "state"), "T").commits():
        assert commit.published is not False
        at = canonical(pq.read_table(commit.record.snapshot_path).to_pylist())
        columns = pq.read_schema(commit.record.snapshot_path).names
        assert canonical(as_of(rows, commit.version), columns) == at, commit.version
    assert _run("verify", "--table", "T", "--snapshot", snapshot) == 0  # the landing folder too


def _add_kafka_and_text(base, broker) -> None:
    """A Kafka sink (a topic of its own) and a landing folder in the text format."""
    topic = f"empty-image-{os.path.basename(base)}"
    with open(base / "diffcdc.toml", "a", encoding="utf-8") as f:
        f.write("[[tables.T.sinks]]\ntype = 'kafka'\nname = 'kafka'\n"
                f"bootstrap_servers = '{broker.bootstrap}'\ntopic = '{topic}'\n"
                "[[tables.T.sinks]]\ntype = 'open_mirroring'\nname = 'text'\n"
                "landing = 'landing_text'\nfile_format = 'text'\nfile_extension = 'txt'\n")


def _killed(base, command: list[str], point: str) -> None:
    """``command`` in a CLI process killed at crash point ``point``."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DIFFCDC_CRASH"))}
    killed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", *command, "--config", "diffcdc.toml", "--quiet"],
        env={**env, "DIFFCDC_CRASH_AT": point}, cwd=base, capture_output=True, text=True,
        timeout=600, check=False)
    assert killed.returncode == 137, killed.stderr


def _two_versions(base) -> None:
    _write(base, "2026-01-01", [{"id": i, "v": v, "u": i} for i, v in ((1, "a"), (2, "b"), (3, "c"))])
    assert _run("run") == 0
    _write(base, "2026-01-02", [{"id": 1, "v": "a2", "u": 1}, {"id": 3, "v": "c", "u": 3}])
    assert _run("run") == 0


def test_a_reload_of_an_empty_snapshot_empties_every_sink(spark, base):
    _two_versions(base)
    empty = _write(base, "2026-01-03", [])
    assert _run("run") == 0  # deletes of every key: not a full image
    _check_sinks(base, empty)
    assert _run("reload", "--table", "T", "--yes") == 0  # the full image of the empty snapshot
    _check_sinks(base, empty)
    head = TableState(str(base / "state"), "T").head()
    assert head is not None and head.version == 4
    from deltalake import DeltaTable

    for lake in ("c", "h"):  # the full image made its commit, with its transaction
        table = DeltaTable(str(base / "lake" / lake))
        assert any(m.get("diffcdc.version") == "4" for m in table.history(1)), lake
    assert _run("run") == 0  # nothing new: no commit
    assert DeltaTable(str(base / "lake" / "c")).history(1)[0].get("diffcdc.version") == "4"
    again = _write(base, "2026-01-04", [])  # a version without changes, not a full image
    assert _run("run") == 0
    assert TableState(str(base / "state"), "T").head().version == 5
    for lake in ("c", "h"):  # makes no Delta commit, as before
        assert DeltaTable(str(base / "lake" / lake)).history(1)[0].get("diffcdc.version") == "4"
    _check_sinks(base, again)



def test_a_rollback_to_an_empty_snapshot_empties_every_sink(spark, base):
    _two_versions(base)
    empty = _write(base, "2026-01-03", [])
    assert _run("run") == 0
    _write(base, "2026-01-04", [{"id": 7, "v": "g", "u": 7}])
    assert _run("run") == 0
    assert _run("rollback", "--table", "T", "--to-version", "3", "--yes") == 0
    _check_sinks(base, empty)


@pytest.mark.default_tier
def test_a_recreation_by_an_empty_snapshot_empties_every_sink(spark, base):
    _two_versions(base)
    empty = _write(base, "2026-01-03", [], NARROWER)  # a column removed: re-created, no rows
    assert _run("run") == 0
    _check_sinks(base, empty)
    from deltalake import DeltaTable

    current = pa.schema(DeltaTable(str(base / "lake" / "c")).schema().to_arrow())
    assert current.names == NARROWER.names  # the snapshot's schema
    after = _write(base, "2026-01-04", [{"id": 5, "v": "e"}], NARROWER)
    assert _run("run") == 0
    _check_sinks(base, after)


@pytest.mark.parametrize("point", ["after_claim", "delta_committed", "before_mark_published",
                                   "after_published"])
def test_a_kill_around_the_empty_images_commit_then_a_rerun_is_exact(spark, base, point):
    """The reload's full image of an empty snapshot killed at each step around its Delta
    commits (the commit is carried with its application transaction: the rerun makes none
    again), then ``run`` finishes it."""
    from deltalake import DeltaTable

    _two_versions(base)
    empty = _write(base, "2026-01-03", [])
    assert _run("run") == 0
    _killed(base, ["reload", "--table", "T", "--yes"], point)
    assert _run("run") == 0
    _check_sinks(base, empty)
    for lake in ("c", "h"):  # version 4's commit made once
        made = [m for m in DeltaTable(str(base / "lake" / lake)).history()
                if m.get("diffcdc.version") == "4"]
        assert len(made) == 1, (lake, made)


def test_a_recreation_by_an_empty_snapshot_empties_kafka_and_a_text_landing(spark, base,
                                                                          broker):
    """The other sink kinds the same way: a Kafka topic (its reference consumer) and a landing
    folder in the text format replay to the empty snapshot after the re-creation."""
    _add_kafka_and_text(base, broker)
    _two_versions(base)
    empty = _write(base, "2026-01-03", [], NARROWER)
    assert _run("run") == 0
    _check_sinks(base, empty)  # verify replays every sink, Kafka and the text folder too
    after = _write(base, "2026-01-04", [{"id": 5, "v": "e"}], NARROWER)
    assert _run("run") == 0  # the topic's check before sending takes the empty message
    _check_sinks(base, after)


@pytest.mark.parametrize("point", ["before_mark_published@kafka", "after_published"])
def test_a_kill_in_an_empty_recreation_with_kafka_then_a_rerun_is_exact(spark, base, broker,
                                                                        point):
    """The re-creation by an empty snapshot killed after Kafka's message was sent (and after
    every sink published), then ``run``: the message is not sent twice, every sink exact."""
    _add_kafka_and_text(base, broker)
    _two_versions(base)
    empty = _write(base, "2026-01-03", [], NARROWER)
    _killed(base, ["run"], point)
    assert _run("run") == 0
    _check_sinks(base, empty)
    kafka = next(k for k in KINDS if k.name == "kafka")  # every message in the topic once
    kafka.assert_once(TableState(str(base / "state"), "T"), "kafka", {"kafka": broker})
