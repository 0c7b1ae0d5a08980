"""Normalizers before the fingerprint (issue 41.4), without Spark: the rules, the config that
names them (unknown rules and normalized keys refused at load), the commit record that keeps
them (old records read as none), the re-fingerprint decision, and verify's comparison."""

from __future__ import annotations

import os
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from diffcdc.cli.main import main
from diffcdc.config_file import load_config
from diffcdc.core.compare import Replayed, compare
from diffcdc.core.fingerprint_ref import RowFingerprinter
from diffcdc.core.normalize import (
    ColumnRules,
    Normalizers,
    Rule,
    canonical_json,
    compared_value,
    normalized_type,
    python_normalizer,
)
from diffcdc.engine.recreate import HashRule, refingerprint
from diffcdc.state.commit import CommitRecord, Counts, Fingerprint


def norm(spec: dict[str, list[str]], column: str, dtype: T.DataType):
    rules = Normalizers.parse(spec).get(column)
    fn = python_normalizer(rules, dtype)
    assert fn is not None
    return fn


def test_rules_apply_in_the_documented_order_whatever_order_they_are_given():
    n = Normalizers.parse({"Code": ["empty_as_null", "casefold", "trim", "json"]})
    assert n.get("code").names() == ["json", "trim", "casefold", "empty_as_null"]
    f = norm({"c": ["empty_as_null", "trim"]}, "c", T.StringType())
    assert f("   ") is None and f(" a ") == "a" and f("") is None


@pytest.mark.parametrize("rule, value, expected", [
    ("trim", " \t a b \r\n\f\v", "a b"),
    ("trim", "\u00a0a\u00a0", "\u00a0a\u00a0"),  # only ASCII whitespace
    ("rtrim", "  CODE    ", "  CODE"),
    ("rtrim", "CODE\t", "CODE\t"),  # a CHAR column's padding is spaces
    ("casefold", "ÄBC", "äbc"),
    ("casefold", "Straße", "straße"),  # Spark's lower(): ß stays
    ("casefold", "İ", "i̇"),
    ("empty_as_null", "", None),
    ("empty_as_null", " ", " "),
    ("json", '{ "b": [1, 2.50, {"y": 1, "x": null}], "a": "é" }',
     '{"a":"\\u00e9","b":[1,2.5,{"x":null,"y":1}]}'),
    ("json", "not json {", "not json {"),
    ("json", " 1.0 ", "1.0"),
])
def test_string_rules(rule, value, expected):
    assert norm({"c": [rule]}, "c", T.StringType())(value) == expected


def test_canonical_json_keeps_what_is_not_json_and_never_fails():
    assert canonical_json(None) is None
    deep = "[" * 100_000 + "]" * 100_000
    assert canonical_json(deep) == deep
    assert canonical_json('{"a":1,"a":2}') == '{"a":2}'
    assert canonical_json("1") != canonical_json("1.0") == canonical_json("1e0") == "1.0"
    assert canonical_json('"\\ud800"') == '"\\ud800"'  # a lone surrogate stays escaped


@pytest.mark.parametrize("digits, value, expected", [
    (2, 1.005, 1.0),  # 1.005 * 100 = 100.49999999999999 in doubles
    (2, 1.015, 1.01),
    (2, 2.675, 2.68),  # 2.675 * 100 = 267.5 in doubles (Python's round(2.675, 2) is 2.67)
    (0, 2.5, 3.0),
    (0, -2.5, -3.0),
    (0, -0.4, 0.0),
    (1, 0.05, 0.1),
    (3, float("inf"), float("inf")),
    (2, 1e300, 1e300),  # |x * 10^N| >= 2^52: unchanged
    (0, 4503599627370495.5, 4503599627370496.0),
])
def test_round_of_doubles(digits, value, expected):
    got = norm({"c": [f"round:{digits}"]}, "c", T.DoubleType())(value)
    assert got == expected and str(got) == str(expected)


def test_round_keeps_nan():
    got = norm({"c": ["round:2"]}, "c", T.FloatType())(float("nan"))
    assert got != got


def test_round_of_decimals_hashes_at_the_rounded_scale():
    dtype = T.DecimalType(10, 4)
    f = norm({"c": ["round:2"]}, "c", dtype)
    assert f(Decimal("1.2350")) == Decimal("1.24") and f(Decimal("-1.2350")) == Decimal("-1.24")
    rules = Normalizers.parse({"c": ["round:2"]}).get("c")
    assert normalized_type(rules, dtype) == T.DecimalType(9, 2)
    assert normalized_type(rules, T.DecimalType(10, 2)) == T.DecimalType(10, 2)  # no-op
    assert norm({"c": ["round:3"]}, "c", T.DecimalType(5, 1))(Decimal("1.5")) == Decimal("1.5")
    # a decimal given as the bytes its hash takes (check_read's fast path)
    assert f((12350).to_bytes(8, "little", signed=True)) == Decimal("1.24")
    wide = norm({"c": ["round:0"]}, "c", T.DecimalType(30, 2))
    assert wide((-250).to_bytes(2, "big", signed=True)) == Decimal("-3")


def test_a_table_without_normalizers_keeps_its_fingerprints():
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("d", pa.float64())])
    row = {"id": 1, "v": " A ", "d": 1.5}
    plain = RowFingerprinter(schema, ["id"])(row)
    assert RowFingerprinter(schema, ["id"], normalize=Normalizers())(row) == plain
    other = RowFingerprinter(schema, ["id"], normalize=Normalizers.parse({"V": ["trim"]}))
    assert other(row) != plain
    assert other(row) == other({"id": 1, "v": "A", "d": 1.5})
    nulled = RowFingerprinter(schema, ["id"], normalize=Normalizers.parse({"v": ["empty_as_null"]}))
    assert nulled({"id": 1, "v": "", "d": 1.5}) == nulled({"id": 1, "v": None, "d": 1.5})


@pytest.mark.parametrize("spec, fragment", [
    ({"c": ["upper"]}, "unknown normalizer 'upper'; known: json, trim, rtrim, casefold, "
                       "empty_as_null, round:N"),
    ({"c": ["round"]}, "round:N with N from 0 to 38"),
    ({"c": ["round:-1"]}, "round:N with N from 0 to 38"),
    ({"c": ["round:39"]}, "round:N with N from 0 to 38"),
    ({"c": ["trim:2"]}, "takes no argument"),
    ({"c": ["trim", "trim"]}, "names trim more than once"),
    ({"c": []}, "has no normalizer"),
    ({"c": "trim"}, "are a list"),
    ({"c": ["trim", "round:2"]}, "round:N is for numbers"),
    ({"c": ["trim"], "C": ["rtrim"]}, "are one column"),
])
def test_bad_rules_are_refused(spec, fragment):
    with pytest.raises(ValueError, match=None) as info:
        Normalizers.parse(spec)
    assert fragment in str(info.value)


def test_fits():
    rules = Normalizers.parse({"c": ["trim"], "n": ["round:1"]})
    assert rules.get("c").fits(T.StringType()) is None
    assert rules.get("n").fits(T.DecimalType(5, 2)) is None
    assert rules.get("n").fits(T.FloatType()) is None
    assert rules.get("c").fits(T.IntegerType()) == "trim needs a string column, 'c' is int"
    assert "round:1 needs a float, double or decimal column, 'n' is bigint" == \
        rules.get("n").fits(T.LongType())


@pytest.fixture
def conf(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs(tmp_path / "src")
    return tmp_path / "diffcdc.toml"


def _table(normalize: str, extra: str = "") -> str:
    return (f"[tables.T]\nsource = 'src'\nkeys = ['Id']\nlanding = 'landing'\n{extra}"
            f"[tables.T.normalize]\n{normalize}\n")


def test_the_config_names_rules_per_column(conf):
    conf.write_text(_table("code = ['casefold', 'trim']\namount = ['round:2']"))
    (table,) = load_config(str(conf)).tables
    assert table.normalizers.describe() == "amount: round:2; code: trim, casefold"


@pytest.mark.parametrize("normalize, extra, fragments", [
    ("code = ['upper']", "", ["table T, field normalize: column 'code': unknown normalizer 'upper'"]),
    ("ID = ['trim']", "", ["key column 'ID' cannot be normalized", "remove it from normalize"]),
    ("audit = ['trim']", "exclude = ['Audit']\n", ["'audit' is excluded from the fingerprint"]),
])
def test_unknown_rules_and_normalized_keys_are_refused_at_load(conf, capsys, normalize, extra,
                                                                fragments):
    conf.write_text(_table(normalize, extra))
    for command in (["run"], ["plan"]):
        assert main([*command, "--config", str(conf)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
        for fragment in fragments:
            assert fragment in err, err
    assert sorted(os.listdir(conf.parent)) == ["diffcdc.toml", "src"]  # nothing written


def _record(**fields) -> CommitRecord:
    schema = T.StructType([T.StructField(n, T.StringType()) for n in ("id", "a", "b", "c")])
    base = dict(version=1, table="T", run_id="r", snapshot_id="s1", version_dir="v",
                state_path="v/state", keys=["id"], exclude=[], schema=schema.jsonValue(),
                fingerprint=Fingerprint(1, 64), counts=Counts(1, 1, 0, 0, 0))
    return CommitRecord(**{**base, **fields})


def test_the_commit_record_keeps_the_normalizers_and_old_records_have_none():
    record = _record(normalize=Normalizers.parse({"a": ["round:2"], "B": ["trim"]}))
    raw = record.to_dict()
    assert raw["normalize"] == {"a": ["round:2"], "B": ["trim"]}
    assert CommitRecord.from_dict(raw) == record
    del raw["normalize"]  # as main's HEAD (487cccd) wrote it
    assert CommitRecord.from_dict(raw).normalize == Normalizers()


SNAPSHOT = T.StructType([T.StructField(n, T.StringType()) for n in ("ID", "A", "B", "C", "D")])


def _rule(exclude=(), **spec) -> HashRule:
    return HashRule(tuple(exclude), Normalizers.parse(spec).only(SNAPSHOT.names))


@pytest.mark.parametrize("head, now, again", [
    ({}, _rule(), False),
    ({"normalize": Normalizers.parse({"a": ["trim"]})}, _rule(A=["trim"]), False),  # case-blind
    ({}, _rule(A=["trim"]), True),
    ({"normalize": Normalizers.parse({"a": ["trim"]})}, _rule(), True),
    ({"normalize": Normalizers.parse({"a": ["trim"]})}, _rule(A=["rtrim"]), True),
    ({"exclude": ["b"]}, _rule(["B"]), False),
    ({"exclude": ["b"]}, _rule(), True),  # exclude is part of the identity now
    ({}, _rule(["b"]), True),
    # a column the head's snapshot did not have takes the new rule on both sides
    ({}, _rule(["D"]), False),
    ({}, _rule(D=["trim"]), False),
    # a column of the head's rule the snapshot no longer has: nothing to compare
    ({"normalize": Normalizers.parse({"c": ["trim"]}), "exclude": ["b"]},
     HashRule(("b",), Normalizers()), True),
])
def test_the_re_fingerprint_decision(head, now, again):
    decided = refingerprint(_record(**head), SNAPSHOT, now)
    assert (decided is not None) == again
    if decided is not None:
        assert decided.stored == now


def test_the_re_fingerprint_compares_under_the_head_rule_for_the_heads_columns():
    decided = refingerprint(_record(normalize=Normalizers.parse({"a": ["trim"]}), exclude=["b"]),
                            SNAPSHOT, _rule(["D"], C=["rtrim"]))
    assert decided is not None
    assert decided.compared == HashRule(("B", "D"), Normalizers.parse({"A": ["trim"]}))
    assert decided.describe() == (
        "fingerprint rule changed from (exclude B, D; normalize A: trim) to (exclude D; "
        "normalize C: rtrim)")


def test_verify_compares_normalized_columns_through_their_rules():
    rules = Normalizers.parse({"v": ["rtrim", "casefold"], "d": ["round:1"]})
    values = {c.column: compared_value(c, dtype) for c, dtype in
              zip(rules.columns, (T.DoubleType(), T.StringType()))}
    sink = Replayed(["id"], ["id", "v", "d"], [{"id": 1, "v": "Ab  ", "d": 1.04}], units=1)
    snapshot = [{"id": 1, "v": "ab", "d": 1.0}]
    assert compare(sink, snapshot, ["id", "v", "d"], values=values).identical
    assert not compare(sink, snapshot, ["id", "v", "d"]).identical
    as_text = Replayed(["id"], ["id", "v", "d"], [{"id": 1, "v": "AB", "d": "1.04"}], units=1)
    assert compare(as_text, [{"id": 1, "v": "ab", "d": "1.0"}], ["id", "v", "d"],
                   values=values).identical
    assert not compare(sink, [{"id": 1, "v": "ab", "d": 1.1}], ["id", "v", "d"],
                       values=values).identical


def test_rule_text_round_trips():
    for text in ("trim", "round:0", "round:38", "json"):
        assert str(Rule.parse(text)) == text
    assert ColumnRules("x", (Rule("round", 2),)).names() == ["round:2"]


def test_the_executors_import_the_json_rules_module_only_for_a_table_with_one(conf):
    from diffcdc.engine.executors import JSON_MODULE, executor_check_modules

    conf.write_text(_table("code = ['trim']"))
    (plain,) = load_config(str(conf)).tables
    assert JSON_MODULE not in executor_check_modules([plain])
    conf.write_text(_table("code = ['json']"))
    (table,) = load_config(str(conf)).tables
    assert JSON_MODULE in executor_check_modules([plain, table])
