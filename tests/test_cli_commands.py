"""The thin command line: the command table, the landing zone's option group, override
checking with the gate, the config loaded once, and errors built whole where raised."""

from __future__ import annotations

import argparse
import importlib
import json

import pytest

from diffcdc.cli.main import main
from diffcdc.cli.parser import BY_NAME, COMMANDS, build_parser
from diffcdc.core.quality_config import QualityConfig
from diffcdc.core.quality_gx import parse_suite, planned_expectations
from diffcdc.core.quality_report import CheckResult, GateReport, raise_if_refused
from diffcdc.engine.gate import check_overrides, read_suite
from diffcdc.errors import ConfigError, DiffcdcError, QualityGateFailed
from diffcdc.sinks.openmirroring.command_line import TITLE
from diffcdc.state.root import StateRoot
from tests.support.cli_runs import one_line_error

#: Options of the landing zone's group (each spelling users' scripts have).
LANDING_FLAGS = ("--codec", "--max-rows-per-file", "--format", "--file-extension",
                 "--row-separator", "--column-separator", "--quote-char", "--escape-char",
                 "--null-value", "--encoding", "--upsert-default", "--file-detection",
                 "--partner-name", "--partner-source-type", "--partner-source-version",
                 "--drop-timeout")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_of_the_table_is_a_subcommand_with_a_handler():
    subcommands = _subcommands(build_parser())
    assert list(subcommands) == [c.name for c in COMMANDS]
    for command in COMMANDS:
        module, _, function = command.handler.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), command.handler
        assert BY_NAME[command.name] is command


@pytest.mark.parametrize("name", ["run", "plan", "reload", "rollback"])
def test_the_landing_zones_flags_are_one_group_of_every_run_command(name):
    command = _subcommands(build_parser())[name]
    (group,) = [g for g in command._action_groups if g.title == TITLE]
    assert sorted(o for a in group._group_actions for o in a.option_strings) == sorted(LANDING_FLAGS)
    args = command.parse_args([*(["--to-version", "1"] if name == "rollback" else []),
                               "--quote-char", "'", "--format", "csv", "--partner-name", "P"])
    assert (args.quote_character, args.file_format, args.partner_name) == ("'", "csv", "P")


def test_run_help_shows_the_landing_group(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert f"\n{TITLE}:\n" in out and "\nquality gate options:\n" in out
    assert out.index(TITLE) > out.index("--override-check") > out.index("--table")


def test_an_unknown_override_names_its_table_where_raised():
    with pytest.raises(ConfigError) as caught:
        check_overrides(["B:no_such_check"], {"A": QualityConfig(), "B": QualityConfig()})
    assert caught.value.table == "B"
    assert str(caught.value).startswith("table B: unknown check name(s) to override: no_such_check")
    assert check_overrides(["delete_ratio"], {"A": QualityConfig()}) == {
        "A": frozenset({"delete_ratio"})}


def test_the_suite_file_is_read_at_the_edge_and_parsed_in_core(tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"expectations": [
        {"expectation_type": "expect_column_to_exist", "kwargs": {"column": "a"}}]}))
    cfg = QualityConfig(expectation_suite=str(path))
    suite = read_suite(cfg)
    assert suite == parse_suite(path.read_text(), str(path))
    assert suite is not None and suite.name == "suite" and suite.path == str(path)
    assert [p.name for p in planned_expectations(cfg, suite)] == ["expect_column_to_exist:a"]
    with pytest.raises(DiffcdcError, match="was not read before its checks were planned"):
        planned_expectations(cfg)
    assert read_suite(QualityConfig()) is None


def test_the_gate_refusal_carries_its_reports():
    failed = CheckResult(name="delete_ratio", passed=False, blocking=True)
    reports = [GateReport("changes", [failed])]
    with pytest.raises(QualityGateFailed) as caught:
        raise_if_refused(reports, "T", "s1")
    assert caught.value.gate == [r.to_dict() for r in reports]


def test_a_state_root_error_names_table_and_config_file_where_raised():
    with pytest.raises(ConfigError) as caught:
        StateRoot("ftp://host/state", table="T", config_file="c.toml")
    assert (caught.value.table, caught.value.path) == ("T", "c.toml")


def test_reload_sink_loads_the_config_once(tmp_path, monkeypatch, capsys):
    import diffcdc.config_file as config_file

    (tmp_path / "src").mkdir()
    path = tmp_path / "c.toml"
    path.write_text(f'[diffcdc]\nstate = "{tmp_path / "state"}"\nlanding = "{tmp_path / "l"}"\n'
                    f'[tables.T]\nsource = "{tmp_path / "src"}"\nkeys = ["id"]\n')
    loads = []
    real = config_file.load_config
    monkeypatch.setattr(config_file, "load_config", lambda p: loads.append(p) or real(p))
    code = main(["reload", "--config", str(path), "--table", "T", "--sink", "nope", "--yes"])
    assert code == 2 and loads == [str(path)]
    assert "reload --sink nope: table T has no sink of that name" in one_line_error(capsys)
