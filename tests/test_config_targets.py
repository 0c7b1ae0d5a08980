"""Config that cannot work is refused at load (issue 27.7): one target (a Delta folder, a
landing table folder, a Kafka topic or transactional id) written by two sinks of one table or
of two tables is exit 2, one line naming both tables or sinks and the field, before anything
is read or written. Paths are compared as the loader resolves them (relative to the file,
trailing slashes, symbolic links)."""

from __future__ import annotations

import os

import pytest

from diffcdc.cli.main import main
from diffcdc.config_file import load_config
from diffcdc.errors import ConfigError
from diffcdc.sinks.targets import folder_location

KAFKA = "{type = 'kafka', bootstrap_servers = '%s', topic = '%s'%s}"


def table(name: str, sinks: str = "", extra: str = "") -> str:
    body = f"[tables.{name}]\nsource = 'src'\nkeys = ['id']\n{extra}"
    return body + (f"sinks = [{sinks}]\n" if sinks else "")


def delta(path: str, more: str = "") -> str:
    return f"{{type = 'delta', path = '{path}'{more}}}"


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    (tmp_path / "conf").mkdir()
    return tmp_path


def refused(base, capsys, text: str, *fragments: str) -> str:
    path = base / "conf" / "diffcdc.toml"
    path.write_text(text)
    for command in (["run"], ["plan"], ["status"]):
        assert main([*command, "--config", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
        for fragment in fragments:
            assert fragment in err, err
    assert sorted(os.listdir(base / "conf")) == ["diffcdc.toml"]  # nothing written
    assert sorted(os.listdir(base)) == ["conf", "src"]
    return err


@pytest.mark.parametrize("text, fragments", [
    # two tables, one Delta folder: relative vs absolute, trailing slash, ./ and ..
    (table("A", delta("lake/x/")) + table("B", delta("{conf}/lake/./x")),
     ["table 'A' sink 'delta' (path) and table 'B' sink 'delta' (path)", "both write to",
      "lake/x"]),
    (table("A", delta("../conf/lake/x")) + table("B", delta("lake/y", ", changelog_path = 'lake/x'")),
     ["table 'A' sink 'delta' (path) and table 'B' sink 'delta' (changelog_path)"]),
    # one Delta sink's change log is its own table
    (table("A", delta("lake/x", ", changelog_path = 'lake/x/'")),
     ["fields path and changelog_path of sink 'delta' of table 'A'"]),
    # a Delta table inside another one
    (table("A", delta("lake/x")) + table("B", delta("lake/x/changes")),
     ["table 'A' sink 'delta' (path) and table 'B' sink 'delta' (path)", "one inside the other"]),
    # one landing root twice in a table, with different codecs
    (table("A", "{type = 'open_mirroring', name = 'a', landing = 'landing'}, "
                "{type = 'open_mirroring', name = 'b', landing = 'landing/', codec = 'zstd'}"),
     ["sink 'a' (landing) and sink 'b' (landing) of table 'A'", "landing/A"]),
    # a landing root inside another table's landing folder
    (table("A", extra="landing = 'landing'\n") + table("B", extra="landing = 'landing/A'\n"),
     ["table 'A' sink 'open_mirroring' (landing) and table 'B' sink 'open_mirroring' (landing)",
      "one inside the other"]),
    # a table named like a schema folder and a table in that schema
    (table("'s.schema'", extra="landing = 'landing'\n")
     + table("X", extra="landing = 'landing'\nschema_name = 's'\n"),
     ["table 's.schema' sink", "table 'X' (schema 's') sink", "one inside the other"]),
    # a Delta table inside a landing root: the landing zone would take it for a table
    (table("A", extra="landing = 'landing'\n") + table("B", delta("landing/lake")),
     ["table 'A' sink 'open_mirroring' (landing) and table 'B' sink 'delta' (path)",
      "the landing zone would take it for a table"]),
    # two partner files for one landing root
    (table("A", extra="landing = 'landing'\npartner = {partner_name = 'p', source_type = 'SQL'}\n")
     + table("B", extra="landing = 'landing'\npartner = {partner_name = 'q', source_type = 'SQL'}\n"),
     ["table 'A' sink 'open_mirroring' (landing) and table 'B'", "different partner settings"]),
    # one Kafka topic on one cluster (the broker lists overlap, in any case and order)
    (table("A", KAFKA % ("h1:9092,h2:9092", "t", "")) + table("B", KAFKA % ("H2:9092", "t", "")),
     ["table 'A' sink 'kafka' (topic) and table 'B' sink 'kafka' (topic)",
      "the Kafka topic 't' on h2:9092"]),
    (table("A", KAFKA % ("h:1", "t", ", name = 'k1'") + ", " + KAFKA % ("h:1", "t", ", name = 'k2'")),
     ["sink 'k1' (topic) and sink 'k2' (topic) of table 'A'"]),
    # one transactional id on one cluster: the producers would fence each other
    (table("A", KAFKA % ("h:1", "t", ", transactional_id = 'x'"))
     + table("B", KAFKA % ("h:1", "u", ", transactional_id = 'x'")),
     ["table 'A' sink 'kafka' (transactional_id) and table 'B' sink 'kafka' (transactional_id)",
      "the transactional id 'x'"]),
])
def test_one_target_twice_is_refused_at_load_naming_both(base, capsys, text, fragments):
    text = text.replace("{conf}", str(base / "conf"))
    err = refused(base, capsys, text, *fragments)
    assert "fix the config file" in err and "give " in err


def test_a_transactional_id_that_is_another_sinks_default_is_refused(base, capsys):
    text = (table("T", KAFKA % ("h:1", "t", ""), "schema_name = 'one'\n")
            + table("U", KAFKA % ("h:1", "u", ", transactional_id = 'diffcdc.one.T.kafka'"),
                    "schema_name = 'two'\n"))
    refused(base, capsys, text, "table 'T' (schema 'one') sink 'kafka' (transactional_id)",
            "table 'U' (schema 'two') sink 'kafka' (transactional_id)",
            "'diffcdc.one.T.kafka' (the default: diffcdc.<schema>.<table>.<sink>)")


def test_configs_that_work_still_load(base):
    path = base / "conf" / "ok.toml"
    path.write_text(
        "[diffcdc]\nlanding = 'landing'\n"
        + table("A") + table("B", extra="schema_name = 's'\n")  # one root, two table folders
        + table("C", delta("lake/c", ", changelog_path = 'lake/c_log'")
                + ", {type = 'open_mirroring', landing = 'landing'}")
        + table("D", KAFKA % ("h:1", "t", "")) + table("E", KAFKA % ("h:2", "t", ""))  # 2 clusters
        + table("F", KAFKA % ("h:1", "f", ", name = 'one'") + ", " + KAFKA % ("h:1", "g", ", name = 'two'"))
        + table("G", extra="partner = {partner_name = 'p', source_type = 'SQL'}\n")
    )
    config = load_config(str(path))
    assert [t.name for t in config.tables] == list("ABCDEFG")


def test_run_dataframe_and_the_command_line_check_one_table_too(base, capsys):
    from diffcdc.config import TableConfig

    with pytest.raises(ValueError, match="sink 'one' .path. and sink 'two' .changelog_path."):
        TableConfig(name="T", source="s", keys=["id"], sinks=[
            {"type": "delta", "name": "one", "path": "lake"},
            {"type": "delta", "name": "two", "path": "other", "changelog_path": "lake/"},
        ])
    # the landing root and the state root are the default here; a run's own table still works
    args = ["plan", "--source", "src", "--keys", "id", "--table", "T", "--landing", "landing"]
    assert main(args) == 0
    capsys.readouterr()


def test_folder_locations_are_normalised(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert folder_location("real/") == folder_location(str(tmp_path / "real")) \
        == folder_location("./link/") == folder_location(f"file://{tmp_path}/real")
    assert folder_location("abfss://fs@Acc.dfs.core.windows.net/a//b/") \
        == folder_location("https://acc.dfs.core.windows.net/fs/a/b") \
        == folder_location("https://ACC.blob.core.windows.net/fs/a/./b")
    assert folder_location("s3://bucket/a/") == "s3://bucket/a"
    assert folder_location("s3://bucket/a") != folder_location("s3://bucket/A")


def test_a_clash_is_a_config_error_naming_the_file(base):
    path = base / "conf" / "diffcdc.toml"
    path.write_text(table("A", delta("x")) + table("B", delta("x")))
    with pytest.raises(ConfigError) as raised:
        load_config(str(path))
    assert raised.value.exit_code == 2 and raised.value.path == str(path)
