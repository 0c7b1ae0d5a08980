"""Normalizers through ``diffcdc run`` (issue 41.4): the CHAR column of docs/normalizers.md,
the controlled re-fingerprint when a table's rules (or its ``exclude``) change, said in the
run's output and ``--json``, and the refusals found once the snapshot's schema is read (a
column the snapshot lacks, a rule that does not fit its type): exit 2 in one line, nothing
committed or published."""

from __future__ import annotations

import json
import os

import pytest

from diffcdc.cli.main import main
from diffcdc.state.chain import state_chain
from diffcdc.state.store import TableState
from tests.support.cli_runs import write
from tests.support.config_text import toml_value


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path


def config(base, normalize: dict | None = None, exclude: list[str] | None = None) -> str:
    text = ("[diffcdc]\nstate = 'state'\n[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n"
            "[tables.T]\nsource = 'src'\nkeys = ['id']\nlanding = 'landing'\n")
    if exclude is not None:
        text += f"exclude = {json.dumps(exclude)}\n"
    if normalize is not None:
        text += f"normalize = {toml_value(normalize)}\n"
    path = base / "diffcdc.toml"
    path.write_text(text)
    return str(path)


def codes(pad: int, changed: tuple[int, ...] = (), n: int = 5, case=str.upper,
          audit: str = "export") -> list[dict]:
    """Rows with a CHAR(10)-like code padded to ``pad`` characters (the rows ``changed``
    really changed), an amount and an audit text."""
    return [{"id": i, "code": (case(f"c{i:03d}") + ("x" if i in changed else "")).ljust(pad),
             "amount": i * 1.5, "audit": audit} for i in range(n)]


def landing_files(base) -> list[str]:
    folder = base / "landing" / "T"
    return sorted(os.listdir(folder)) if folder.exists() else []


def run_json(path: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["run", "--config", path, "--json", "--quiet"]) == 0
    (report,) = json.loads(capsys.readouterr().out)["tables"]
    return report


def test_a_char_column_re_exported_with_other_blanks_is_no_update(spark, base, capsys):
    path = config(base, {"code": ["rtrim"]}, exclude=["audit"])
    write(base / "src" / "1.parquet", codes(10))
    assert run_json(path, capsys)["snapshots"][0]["inserted"] == 5
    files = landing_files(base)
    # other trailing blanks, another audit text (excluded): nothing changed
    write(base / "src" / "2.parquet", codes(7, audit="export 2"))
    (snap,) = run_json(path, capsys)["snapshots"]
    assert (snap["updated"], snap["files"], snap["refingerprinted"]) == (0, [], None)
    assert landing_files(base) == files
    # the landing zone holds the padding of version 1: identical through the rule
    assert main(["verify", "--config", path, "--table", "T", "--snapshot",
                 str(base / "src" / "2.parquet")]) == 0
    write(base / "src" / "3.parquet", codes(12, changed=(3,), audit="export 3"))
    (snap,) = run_json(path, capsys)["snapshots"]
    assert (snap["inserted"], snap["updated"], snap["deleted"]) == (0, 1, 0)
    assert main(["verify", "--config", path, "--table", "T", "--snapshot",
                 str(base / "src" / "3.parquet")]) == 0
    assert main(["verify", "--config", path, "--state"]) == 0
    assert TableState(str(base / "state"), "T").head().record.normalize.describe() == "code: rtrim"


def test_changed_rules_are_a_re_fingerprint_not_a_night_of_updates(spark, base, capsys):
    """Rules added to a table with a changes-only state: the version is compared under the
    old rule (the one real change is an update), stores the new rule's fingerprints as a whole
    base, and says so; the next night, every code re-exported in lower case with other blanks,
    is a normal delta with no update."""
    plain = config(base)
    write(base / "src" / "1.parquet", codes(10))
    write(base / "src" / "2.parquet", codes(10, changed=(1,)))
    assert main(["run", "--config", plain, "--quiet"]) == 0
    state = TableState(str(base / "state"), "T")
    assert [link.delta for link in state_chain(state.commits())] == [False, True]
    rules = config(base, {"code": ["rtrim", "casefold"]})
    # spelled as before (upper case: the new rule alone would change every fingerprint), and
    # one real change
    write(base / "src" / "3.parquet", codes(10, changed=(1, 2)))
    capsys.readouterr()
    assert main(["run", "--config", rules]) == 0
    out, err = capsys.readouterr()
    line = ("fingerprint rule changed from (exclude none; normalize none) to (exclude none; "
            "normalize code: rtrim, casefold)")
    assert f"T: version 3 re-fingerprinted the table ({line}); no row counted as changed " \
           "because of it" in out
    assert f"3.parquet: re-fingerprinting the table ({line})" in err
    head = TableState(str(base / "state"), "T").head()
    assert (head.record.counts.updated, head.record.state_parent) == (1, None)
    assert head.record.normalize.describe() == "code: rtrim, casefold"
    write(base / "src" / "4.parquet", codes(14, changed=(1, 2), case=str.lower))
    (snap,) = run_json(rules, capsys)["snapshots"]
    assert (snap["updated"], snap["refingerprinted"]) == (0, None)
    assert TableState(str(base / "state"), "T").head().record.state_parent == 3
    assert main(["verify", "--config", rules, "--table", "T", "--snapshot",
                 str(base / "src" / "4.parquet")]) == 0
    assert main(["verify", "--config", rules, "--state"]) == 0


def test_a_changed_exclude_is_a_re_fingerprint_too(spark, base, capsys):
    """``exclude`` is part of the fingerprint's identity: a column excluded from now on whose
    values changed tonight is no update (it was one before this version: every row)."""
    write(base / "src" / "1.parquet", codes(10))
    assert main(["run", "--config", config(base), "--quiet"]) == 0
    write(base / "src" / "2.parquet", [{**r, "audit": "tonight"} for r in codes(10)])
    (snap,) = run_json(config(base, exclude=["AUDIT"]), capsys)["snapshots"]
    assert snap["updated"] == 5  # changed under the rule of before: still updates
    assert snap["refingerprinted"] == ("fingerprint rule changed from (exclude none; normalize "
                                       "none) to (exclude AUDIT; normalize none)")
    write(base / "src" / "3.parquet", [{**r, "audit": "tomorrow"} for r in codes(10)])
    (snap,) = run_json(config(base, exclude=["audit"]), capsys)["snapshots"]
    assert (snap["updated"], snap["refingerprinted"]) == (0, None)  # same rule, other case


@pytest.mark.parametrize("normalize, fragments", [
    ({"nope": ["trim"]}, ["normalize names column 'nope', which the snapshot does not have "
                          "(its columns: id, code, amount, audit)",
                          "correct the column's name in the table's normalize setting"]),
    ({"amount": ["trim"]}, ["normalizer trim needs a string column, 'amount' is double",
                            "use string rules (trim, rtrim, casefold, empty_as_null, json) on "
                            "string columns and round:N on float, double or decimal columns"]),
    ({"code": ["round:2"]}, ["normalizer round:2 needs a float, double or decimal column, "
                             "'code' is string"]),
])
def test_a_rule_that_does_not_fit_the_snapshot_is_refused_with_nothing_published(
        spark, base, capsys, normalize, fragments):
    write(base / "src" / "1.parquet", codes(10))
    assert main(["run", "--config", config(base), "--quiet"]) == 0
    files = landing_files(base)
    log = sorted(os.listdir(base / "state" / "T" / "log"))
    write(base / "src" / "2.parquet", codes(8, changed=(1,)))
    capsys.readouterr()
    assert main(["run", "--config", config(base, normalize), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()  # a table's refusal in a run: one line
    assert len(err.splitlines()) == 1 and "table T, snapshot 2.parquet: " in err, err
    for fragment in fragments:
        assert fragment in err, err
    assert landing_files(base) == files
    assert sorted(os.listdir(base / "state" / "T" / "log")) == log
    head = TableState(str(base / "state"), "T").head()
    assert head.version == 1 and head.published
