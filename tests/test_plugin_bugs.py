"""A third-party sink plug-in's bug (a KeyError, not a diffcdc error) in any classmethod the
engine asks — ``check_secrets``, ``check_target``, ``published_output``, ``status``,
``result``, ``drop_target``, ``drop``, ``build`` — is one line naming the sink type, the
plug-in and what it was asked (never ``table T: KeyError: ...``), exit 1, with nothing
committed or deleted because of it; a diffcdc error the plug-in raises passes unchanged."""

from __future__ import annotations

import os
from typing import Any

import pytest

from diffcdc.cli.main import main
from diffcdc.errors import UsageError
from diffcdc.sinks.plugin import Capabilities, SinkPlugin
from diffcdc.sinks.registry import registered_sink
from diffcdc.state.store import TableState
from tests.support.cli_runs import one_line_error, rows, write
from tests.support.memory_sink import MemorySinks

FIX = " — fix the sink plug-in; run again with --debug for the full trace"


def _buggy(sinks: MemorySinks, step: str, error: Exception | None = None) -> type[SinkPlugin]:
    """``sinks``' memory plug-in, able to drop and check targets, whose ``step`` raises
    ``error`` (a KeyError naming the step by default)."""

    def broken(cls: Any, *args: Any) -> Any:
        raise error or KeyError(step)

    return type("BuggyPlugin", (sinks.plugin,), {
        "capabilities": Capabilities(drop=True, target_checks=True),
        step: classmethod(broken)})


@pytest.fixture
def base(tmp_path):
    write(str(tmp_path / "src" / "s1" / "part.parquet"), rows(3))
    (tmp_path / "c.toml").write_text(
        f"[diffcdc]\nstate = '{tmp_path / 'state'}'\n[tables.T]\nsource = '{tmp_path / 'src'}'\n"
        "keys = ['id']\n[[tables.T.sinks]]\ntype = 'memory'\nname = 'm'\n")
    return tmp_path


def _cli(base, *args: str) -> int:
    return main([args[0], "--config", str(base / "c.toml"), *args[1:]])


def _commits(base) -> int:
    return len(TableState(str(base / "state"), "T").commits())


@pytest.mark.parametrize(("step", "command", "asked"), [
    ("published_output", ("plan",), "look for output of sink m published before"),
    ("check_secrets", ("plan",), "check the secrets of sink m of table T"),
    ("drop_target", ("drop", "--table", "T"), "name what a drop deletes of sink m"),
    ("drop", ("drop", "--table", "T", "--yes"), "drop the output of sink m"),
])
def test_a_plugin_bug_before_spark_is_one_line_naming_its_step(base, capsys, step, command, asked):
    sinks = MemorySinks()
    target = sinks.add("m")
    with registered_sink(_buggy(sinks, step)):
        code = _cli(base, *command)
    err = one_line_error(capsys) if command[0] == "drop" else str(capsys.readouterr())
    assert code == 1, err
    assert (f"sink type 'memory': its plug-in BuggyPlugin failed to {asked}: KeyError: "
            f"'{step}'{FIX}") in err
    assert err.count("KeyError") == 1, err
    assert target.versions == [] and _commits(base) == 0
    if step == "drop":  # the state is not forgotten: the drop is finished by running it again
        assert os.path.isdir(base / "state" / "T")


def test_a_diffcdc_error_from_a_plugin_passes_unchanged(base, capsys):
    sinks = MemorySinks()
    sinks.add("m")
    refusal = UsageError("the bucket is sealed", table="T", hint="unseal it")
    with registered_sink(_buggy(sinks, "drop_target", refusal)):
        assert _cli(base, "drop", "--table", "T") == 2
    assert one_line_error(capsys) == "diffcdc: error: table T: the bucket is sealed — unseal it"


def test_a_plugin_bug_after_a_commit_is_one_line_naming_its_step(spark, base, capsys):
    sinks = MemorySinks()
    target = sinks.add("m")
    with registered_sink(sinks.plugin):
        assert _cli(base, "run") == 0
    assert _commits(base) == 1 and len(target.versions) == 1
    capsys.readouterr()

    with registered_sink(_buggy(sinks, "status")):
        assert _cli(base, "status") == 1
    assert one_line_error(capsys) == (
        "diffcdc: error: sink type 'memory': its plug-in BuggyPlugin failed to give the status "
        f"of a committed version: KeyError: 'status'{FIX}")

    write(str(base / "src" / "s2" / "part.parquet"), rows(3, changed=1))
    checked = ("sink type 'memory': its plug-in BuggyPlugin failed to check the target of sink "
               f"m against its last commit: KeyError: 'check_target'{FIX}")
    with registered_sink(_buggy(sinks, "check_target")):
        assert _cli(base, "plan") == 1
        assert one_line_error(capsys) == f"diffcdc: error: table T: {checked}"
        assert _cli(base, "run") == 1
    err = capsys.readouterr().err
    assert checked in err and "Traceback" not in err
    assert _commits(base) == 1 and len(target.versions) == 1  # nothing committed or published

    with registered_sink(_buggy(sinks, "build")):
        assert _cli(base, "run") == 1
    err = capsys.readouterr().err
    assert ("sink m: its plug-in BuggyPlugin failed to build it: KeyError: 'build'") in err
    assert _commits(base) == 1 and len(target.versions) == 1

    # ``result`` is asked once the version is committed and published: its bug is named
    with registered_sink(_buggy(sinks, "result")):
        assert _cli(base, "run") == 1
    err = capsys.readouterr().err
    assert ("sink type 'memory': its plug-in BuggyPlugin failed to give the files of a "
            f"committed version: KeyError: 'result'{FIX}") in err
    assert "Traceback" not in err
