"""Issue 38, messages and smaller gaps: each answer of the command line names what went wrong
and a way out that works as printed; names from the command line stay inside their roots."""

from __future__ import annotations

import os

import pytest

from diffcdc.cli.main import main
from tests.support.cli_runs import one_line_error


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


TABLE = "[diffcdc]\nstate = 'state'\n[tables.T]\nsource = 'src'\nkeys = ['id']\n"


# -- a config file ---------------------------------------------------------------------------


def test_a_config_file_with_a_byte_order_mark_is_read(base, capsys):
    path = base / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (TABLE + "landing = 'landing'\n").encode())
    assert main(["status", "--config", str(path)]) == 0
    assert "T: no snapshot committed yet" in capsys.readouterr().out


def test_a_config_file_that_is_not_utf8_is_one_line(base, capsys):
    path = base / "latin.toml"
    path.write_bytes(TABLE.encode() + b"landing = 'l\xe4nding'\n")
    assert main(["status", "--config", str(path)]) == 2
    err = one_line_error(capsys)
    assert "latin.toml: not UTF-8 text" in err and "save the file as UTF-8" in err


@pytest.mark.parametrize("sink, fragment", [
    ("{ name = 'lz', landing = 'landing' }", "table T, sink 'lz': the sink has no `type`"),
    ("{ landing = 'landing' }", "table T, sink #1: the sink has no `type`"),
    ("{ name = 'lz', type = 'landing' }", "table T, sink 'lz': unknown sink type 'landing'"),
])
def test_a_sink_without_a_known_type_names_the_sink_and_the_types(base, capsys, sink, fragment):
    path = base / "c.toml"
    path.write_text(TABLE + f"sinks = [{sink}]\n")
    assert main(["plan", "--config", str(path)]) == 2
    err = one_line_error(capsys)
    assert fragment in err, err
    assert "one of 'open_mirroring', 'delta', 'kafka'" in err
    assert "discriminator" not in err and "Input tag" not in err


# -- names from the command line ----------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["verify", "--state", "state", "--table", "../../etc"],
    ["verify", "--state", "state", "--table", "T", "--schema", "../x"],
    ["status", "--state", "state", "--table", "../T"],
    ["repair", "--state", "state", "--table", "..", "--source", "src"],
    ["drop", "--state", "state", "--table", "../T", "--landing", "landing", "--yes"],
    ["reload", "--state", "state", "--table", "T", "--source", "src", "--keys", "id",
     "--landing", "landing", "--sink", "../../x", "--yes"],
    ["verify", "--state", "state", "--table", "T", "--snapshot", "src", "--sink", "a/b"],
])
def test_a_table_schema_or_sink_name_that_leaves_its_root_is_refused(base, capsys, argv):
    os.makedirs(base / "state" / "T")
    (base / "etc").mkdir()
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert "contains '/'" in err or "is not a folder name" in err, err
    assert os.listdir(base / "state") == ["T"] and not (base / "landing").exists()


def test_status_of_an_unknown_table_lists_the_tables_and_exits_2(spark, base, capsys):
    from tests.support.cli_runs import rows, run_args, write

    write(str(base / "src" / "1.parquet"), rows(3))
    assert main(run_args(base)) == 0
    capsys.readouterr()
    for extra in ([], ["--json"]):
        assert main(["status", "--state", str(base / "state"), "--table", "Nope", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"diffcdc: error: --table Nope is not a table of the state root "
                       f"{base / 'state'}: its tables are T — check --table (a table with a "
                       "schema is <schema>.schema.<Table> here) and --state"), err
    os.makedirs(base / "empty")
    assert main(["status", "--state", str(base / "empty"), "--table", "T"]) == 2
    assert "it holds no table yet" in one_line_error(capsys)
    # named with its source folder, a table not run yet shows its waiting snapshots
    assert main(["status", "--state", str(base / "empty"), "--table", "T", "--source",
                 str(base / "src")]) == 0
    out = capsys.readouterr().out
    assert "T: waiting: 1.parquet" in out and "T: no snapshot committed yet" in out


# -- a state file whose bytes are damaged -----------------------------------------------------


def test_a_state_file_that_fails_its_checksum_is_named_with_the_repair_that_works(
    spark, base, capsys
):
    import glob
    import re
    import shlex

    from tests.support.cli_runs import rows, run_args, write

    write(str(base / "src" / "1.parquet"), rows(2000))
    assert main(run_args(base, "--quiet")) == 0
    (part,) = glob.glob(str(base / "state" / "T" / "versions" / "*" / "state" / "*.parquet"))
    with open(part, "rb") as handle:
        data = bytearray(handle.read())
    for i in range(200, 600):  # same size, same footer: only the checksum can tell
        data[i] ^= 0x5A
    with open(part, "wb") as handle:
        handle.write(bytes(data))
    write(str(base / "src" / "2.parquet"), rows(2000, changed=5))
    capsys.readouterr()
    assert main(run_args(base, "--quiet")) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("T: "))
    assert f"file {part}: state version 1 is damaged: one of its files cannot be read" in line
    assert "cannot read snapshot" not in line and "2.parquet: " not in line.split(" — ")[0]
    repair = re.search(r"'(diffcdc repair [^']+)'", line).group(1)
    assert main(shlex.split(repair)[1:]) == 0
    assert main(run_args(base, "--quiet")) == 0


# -- a run that only publishes what an earlier run left unpublished -----------------------------


def test_a_run_that_publishes_only_a_backlog_says_so(spark, base, capsys, monkeypatch):
    import json

    from diffcdc.errors import StorageError
    from diffcdc.sinks.openmirroring.sink import OpenMirroringSink
    from tests.support.cli_runs import rows, run_args, write

    real = OpenMirroringSink.publish

    def down(self, *args, **kwargs):
        raise StorageError("injected outage")

    for n, extra in ((1, ["--json"]), (2, [])):
        write(str(base / "src" / f"{n}.parquet"), rows(3, changed=n - 1))
        monkeypatch.setattr(OpenMirroringSink, "publish", down)
        assert main(run_args(base, "--quiet")) == 1
        monkeypatch.setattr(OpenMirroringSink, "publish", real)
        capsys.readouterr()
        assert main(run_args(base, "--quiet", *extra)) == 0
        out = capsys.readouterr().out
        if extra:
            (table,) = json.loads(out)["tables"]
            assert table["backlog_published"] == {"open_mirroring": [1]}
            assert table["resumed_versions"] == [1] and table["snapshots"] == []
        else:
            assert ("T: published version 2 to sink open_mirroring (committed by an earlier run, "
                    "left unpublished)") in out
            assert "0 snapshot(s), +0 ~0 -0, 0 file(s), 1 version(s) of the backlog published" \
                in out
    assert main(run_args(base, "--quiet")) == 0
    out = capsys.readouterr().out
    assert "backlog" not in out and "nothing to do" in out


# -- the commands a message suggests run as printed ---------------------------------------------


def test_a_suggested_reload_carries_the_runs_options_and_runs_as_printed(spark, base, capsys):
    import re
    import shlex

    import pyarrow as pa
    import pyarrow.parquet as pq

    def snap(n: int, v: str) -> None:
        pq.write_table(pa.table({"id": [1, 2, 3], "id2": [10, 20, 30], "v": ["a", "b", v]}),
                       str(base / "src" / f"{n}.parquet"))

    src, landing, state = (str(base / n) for n in ("src", "landing", "state"))
    options = ["--source", src, "--table", "T", "--landing", landing, "--state", state,
               "--codec", "zstd", "--quiet"]
    snap(1, "c")
    assert main(["run", "--keys", "id", *options]) == 0
    snap(2, "d")
    capsys.readouterr()
    assert main(["run", "--keys", "id2", *options]) == 3
    out = capsys.readouterr().out
    reload = re.search(r"'(diffcdc reload [^']+)'", out).group(1)
    assert reload == (f"diffcdc reload --table T --keys id2 --source {src} --landing {landing} "
                      f"--state {state} --codec zstd --yes"), reload
    assert main(shlex.split(reload)[1:]) == 0
    assert os.listdir(base / "landing" / "T") and main(["run", "--keys", "id2", *options]) == 0
    assert "nothing to do" in capsys.readouterr().out

    # from a config file: the suggestion names the file
    path = base / "c.toml"
    path.write_text("[diffcdc]\nstate = 'state'\nlanding = 'landing'\n[tables.T]\n"
                    "source = 'src'\nkeys = ['id']\ncodec = 'zstd'\n")
    snap(3, "e")
    assert main(["plan", "--config", str(path)]) == 3
    reload = re.search(r"'(diffcdc reload [^']+)'", capsys.readouterr().out).group(1)
    assert reload == f"diffcdc reload --table T --config {path} --yes"


def test_suggested_commands_take_only_the_options_they_accept():
    from diffcdc.cli.hints import Invocation
    from diffcdc.cli.parser import build_parser

    run = Invocation(build_parser(), [
        "run", "--source", "my src", "--keys", "id", "--table", "T", "--landing", "l",
        "--state", "st", "--landing-option", "max_workers=8", "--json", "--override-check",
        "delete_ratio"])
    assert run.complete("finish it with 'diffcdc drop --table T --yes', then run again") == (
        "finish it with 'diffcdc drop --table T --landing l --state st --landing-option "
        "max_workers=8 --yes', then run again")
    assert run.complete("(diffcdc reload --sink k --yes)", "T") == (
        "(diffcdc reload --sink k --table T --source 'my src' --keys id --landing l --state st "
        "--landing-option max_workers=8 --yes)")
    already = "'diffcdc repair --table T --state /s --source /src' (exact)"
    assert run.complete(already) == already  # repair takes no --keys, --landing ...
    for prose in ("(diffcdc reload) re-creates it", "see 'diffcdc run --help'"):
        assert run.complete(prose, "T") == prose
    config = Invocation(build_parser(), ["verify", "--conf", "c.toml", "--table", "T",
                                         "--snapshot", "s.parquet"])  # a prefix, as argparse
    assert config.complete("'diffcdc reload --table T --sink k --yes'") == (
        "'diffcdc reload --table T --sink k --config c.toml --yes'")
    assert config.complete("'diffcdc repair --config <the config file> --table T'") == (
        "'diffcdc repair --config c.toml --table T'")
    bare = Invocation(build_parser(), ["verify", "--landing", "l", "--state", "--table", "T",
                                       "--snapshot", "s.parquet"])  # --state: the default root
    assert bare.complete("'diffcdc reload --table T --sink k --yes'") == (
        "'diffcdc reload --table T --sink k --landing l --yes'")


# -- verify of dates and timestamps Python cannot hold -------------------------------------------


def _far_dates(shift_days: int = 0):
    import pyarrow as pa

    return pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "d": pa.array([0, 3_000_000 + shift_days, -800_000], pa.date32()),
        "ts": pa.array([0, 300_000_000_000_000_000, -70_000_000_000_000_000],
                       pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([1, 300_000_000_000_000_000, None], pa.timestamp("us")),
    })


def test_verify_compares_dates_python_cannot_hold_exactly():
    import datetime as dt

    from diffcdc.core.compare import Replayed, arrow_rows, compare

    rows = arrow_rows(_far_dates())
    same = compare(Replayed(["id"], ["id", "d", "ts", "ntz"], arrow_rows(_far_dates())), rows,
                   ["id", "d", "ts", "ntz"])
    assert same.identical and same.mirror_rows == 3
    one_day = compare(Replayed(["id"], ["id", "d"], arrow_rows(_far_dates(shift_days=1))), rows,
                      ["id", "d"])
    assert not one_day.identical and one_day.missing == [2] and one_day.unexpected == [2]
    # a value Python holds compares with the same value read as an integer
    python = [{"id": 1, "d": dt.date(1970, 1, 1),
               "ts": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
               "ntz": dt.datetime(1970, 1, 1, 0, 0, 0, 1)}]
    assert compare(Replayed(["id"], [], python), rows[:1], ["id", "d", "ts", "ntz"]).identical
    naive = [{**python[0], "ts": dt.datetime(1970, 1, 1)}]  # wall-clock time is no instant
    assert not compare(Replayed(["id"], [], naive), rows[:1], ["id", "ts"]).identical


def test_verify_of_a_landing_zone_with_dates_beyond_year_9999(spark, base, capsys):
    import pyarrow.parquet as pq

    pq.write_table(_far_dates(), str(base / "src" / "1.parquet"))
    options = ["--table", "T", "--landing", str(base / "landing"), "--state", str(base / "state")]
    assert main(["run", "--source", str(base / "src"), "--keys", "id", "--quiet", *options]) == 0
    capsys.readouterr()
    assert main(["verify", *options, "--snapshot", str(base / "src" / "1.parquet")]) == 0
    assert "T: identical" in capsys.readouterr().out
    pq.write_table(_far_dates(shift_days=1), str(base / "other.parquet"))
    assert main(["verify", *options, "--snapshot", str(base / "other.parquet")]) == 1
    out = capsys.readouterr().out
    assert "T: DIFFERENT" in out and "missing or different for keys [2]" in out, out


# -- bytes changed inside a Parquet snapshot ------------------------------------------------------


def _flipped(path, checksums: bool) -> None:
    """A snapshot of 5,000 (id, v) rows, uncompressed and plain, with one bit of the value of
    row 2500 flipped: the file stays readable, only a page CRC can tell."""
    import struct

    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 5000
    table = pa.table({"id": pa.array(range(n), pa.int64()),
                      "v": pa.array([i * 7 for i in range(n)], pa.int64())})
    pq.write_table(table, str(path), write_page_checksum=checksums, compression="none",
                   use_dictionary=False)
    data = bytearray(path.read_bytes())
    data[data.find(struct.pack("<q", 7 * 2500))] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_changed_byte_in_a_page_with_a_checksum_is_refused(spark, base, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from diffcdc.state.check_read import parquet_dataset
    from diffcdc.state.store import TableState

    n = 5000
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()),
                             "v": pa.array([i * 7 for i in range(n)], pa.int64())}),
                   str(base / "src" / "1.parquet"))
    argv = ["run", "--source", str(base / "src"), "--keys", "id", "--table", "T", "--landing",
            str(base / "landing"), "--state", str(base / "state"), "--quiet"]
    assert main(argv) == 0
    _flipped(base / "src" / "2.parquet", checksums=True)
    capsys.readouterr()
    assert main(argv) == 3
    out = capsys.readouterr().out
    assert "snapshot 2.parquet" in out and "CRC checksum verification failed" in out, out
    assert TableState(str(base / "state"), "T").head().version == 1
    assert sorted(os.listdir(base / "landing" / "T")) == ["00000000000000000001.parquet",
                                                           "_metadata.json"]
    with pytest.raises(OSError, match="CRC checksum"):  # verify --state's reader checks too
        parquet_dataset(str(base / "src" / "2.parquet")).to_table()
    # Without a CRC (pyarrow's default) the changed value is data: documented, not detectable.
    os.remove(base / "src" / "2.parquet")
    _flipped(base / "src" / "3.parquet", checksums=False)
    assert main(argv) == 0
    assert "+0 ~1 -0" in capsys.readouterr().out


# -- a damaged middle link of the state chain whose snapshot was moved away ------------------------


def test_a_damaged_middle_link_without_its_snapshot_is_repaired_from_the_heads(spark, base,
                                                                                  capsys):
    import re
    import shlex

    from diffcdc.state.store import TableState
    from tests.support.cli_runs import rows, run_args, write

    for n in (1, 2):  # a base, then two deltas (few changes each)
        write(str(base / "src" / f"{n}.parquet"), rows(40, changed=n - 1))
    write(str(base / "src" / "3.parquet"), rows(39, changed=2))  # version 3 deletes key 39
    assert main(run_args(base, "--quiet")) == 0
    state = TableState(str(base / "state"), "T")
    commits = state.commits()
    assert [c.record.state_parent for c in commits] == [None, 1, 2]
    middle = state.abspath(commits[1].record.state_path)
    for name in os.listdir(middle):
        if name.endswith(".parquet"):
            os.remove(os.path.join(middle, name))
    os.rename(base / "src" / "2.parquet", base / "moved-2.parquet")  # the extract moved away
    write(str(base / "src" / "4.parquet"), rows(39, changed=4))
    capsys.readouterr()
    assert main(run_args(base, "--quiet")) == 1
    out = capsys.readouterr().out
    assert "state version 2 is damaged" in out
    assert "reads snapshot 2.parquet, or else the head's snapshot 3.parquet" in out, out
    repair = re.search(r"'(diffcdc repair [^']+)'", out).group(1)
    assert main(shlex.split(repair)[1:]) == 0  # exact, no sink touched
    said = capsys.readouterr().out
    assert "the head version 3's state was rebuilt whole from its snapshot" in said, said
    head = state.commits()[-1].record
    assert head.version == 3 and head.state_parent is None  # a base now: 2 is not needed
    landing = sorted(os.listdir(base / "landing" / "T"))
    assert main(run_args(base, "--quiet")) == 0
    assert len(sorted(os.listdir(base / "landing" / "T"))) == len(landing) + 1  # a diff, no reload
    assert main(["verify", "--landing", str(base / "landing"), "--state", str(base / "state"),
                 "--table", "T", "--snapshot", str(base / "src" / "4.parquet")]) == 0
    assert main(["verify", "--state", str(base / "state"), "--table", "T"]) == 0


def test_dates_read_as_integers_sort_and_compare_like_dates():
    import datetime as dt

    from diffcdc.core.compare import norm_value

    days = [dt.date(2024, 1, 2), dt.date(1, 1, 1), dt.date(9999, 12, 31)]
    assert sorted(norm_value(d) for d in days) == [norm_value(d) for d in sorted(days)]
    moments = [dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))),
               dt.datetime(2024, 1, 1, 10, 0, 0, 1, tzinfo=dt.timezone.utc)]
    assert norm_value(moments[0]) < norm_value(moments[1])
    assert norm_value(dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)) == norm_value(
        moments[0])  # one instant in two zones
