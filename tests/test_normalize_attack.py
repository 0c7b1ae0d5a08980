"""Normalizers attacked (issue 41, item 4; docs/normalizers.md): a re-fingerprint on a scoped
table whose kept keys have no row to hash under the new rule. Fails on the code before its fix;
the sinks are read back with deltalake (independent of the code under test)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from diffcdc.cli.main import main
from diffcdc.state.store import TableState


def _config(base, normalize: str) -> str:
    path = str(base / "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            f"[diffcdc]\nstate = {json.dumps(str(base / 'state'))}\n\n"
            "[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n\n"
            f"[tables.T]\nsource = {json.dumps(str(base / 'src'))}\nkeys = [\"id\"]\n\n"
            f"[[tables.T.sinks]]\ntype = \"delta\"\nname = \"lake\"\n"
            f"path = {json.dumps(str(base / 'lake'))}\n\n"
            f"[[tables.T.sinks]]\ntype = \"delta\"\nname = \"hist\"\nmode = \"scd2\"\n"
            f"path = {json.dumps(str(base / 'hist'))}\n\n"
            f"[tables.T.scope]\ncolumns = [\"region\"]\n\n{normalize}")
    return path


def _snapshot(base, name: str, rows: list[tuple]) -> None:
    os.makedirs(base / "src", exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"id": i, "region": r, "v": v} for i, r, v in rows]),
                   base / "src" / name)


def _read(base, name: str) -> list[tuple]:
    from deltalake import DeltaTable

    table = DeltaTable(str(base / name)).to_pyarrow_table()
    ends = table.column("__END_AT").to_pylist() if "__END_AT" in table.column_names else None
    rows = zip(table.column("id").to_pylist(), table.column("v").to_pylist(),
               *([ends] if ends is not None else []))
    return sorted(rows, key=lambda r: tuple(-1 if x is None else x for x in r))


def test_kept_keys_across_a_rule_change_publish_their_next_change(spark, tmp_path):
    """v has casefold; keys 2 and 3 (region us) are kept while eu snapshots come; the rule is
    removed (a re-fingerprint) while they are kept; then a us snapshot changes key 2's v from
    'X' to 'x' (a change without the rule) and holds key 3 as it was. Key 2's fingerprint was
    the old rule's (hash of 'x'): its change counted as unchanged and the lake kept 'X' with
    exit 0. Now both are updates; the history records key 2's change and nothing for key 3
    (the same values: an adding-a-rule re-fingerprint made such an update and the history
    refused it for good, 'update with no changed column', with exit 1)."""
    casefold = '[tables.T.normalize]\nv = ["casefold"]\n'
    _snapshot(tmp_path, "1.parquet", [(1, "eu", "ABC"), (2, "us", "X"), (3, "us", "Q")])
    assert main(["run", "--config", _config(tmp_path, casefold), "--quiet"]) == 0
    _snapshot(tmp_path, "2.parquet", [(1, "eu", "abc")])  # no change under casefold
    assert main(["run", "--config", _config(tmp_path, casefold), "--quiet"]) == 0
    _snapshot(tmp_path, "3.parquet", [(1, "eu", "abc")])
    assert main(["run", "--config", _config(tmp_path, ""), "--quiet"]) == 0
    state = TableState(str(tmp_path / "state"), "T")
    counts = state.head().record.counts
    # the re-fingerprint: key 1 compared under the old rule (unchanged), keys 2 and 3 kept
    assert (counts.updated, counts.unchanged, counts.kept) == (0, 1, 2)
    assert _read(tmp_path, "lake") == [(1, "ABC"), (2, "X"), (3, "Q")]
    _snapshot(tmp_path, "4.parquet", [(2, "us", "x"), (3, "us", "Q")])
    assert main(["run", "--config", _config(tmp_path, ""), "--quiet"]) == 0
    counts = state.head().record.counts
    assert (counts.updated, counts.unchanged, counts.kept) == (2, 0, 1)
    assert _read(tmp_path, "lake") == [(1, "ABC"), (2, "x"), (3, "Q")]
    assert _read(tmp_path, "hist") == [(1, "ABC", None), (2, "X", 4), (2, "x", None),
                                       (3, "Q", None)]


@pytest.mark.slow
def test_every_sink_kind_takes_a_kept_keys_update_after_a_re_fingerprint(spark, servers,
                                                                         tmp_path):
    """Every sink kind on one scoped table: a rule added (casefold) in the version that keeps
    keys 2 and 3; then a us snapshot holds key 2 as it was ('X': hashed 'x' now, so an update
    repeating its values, which the history refused for good with exit 1) and key 3 really
    changed. Every sink compared with the test's own image of the last version (kept keys'
    values included), each sink's "nothing twice" check, the history as of every version."""
    from diffcdc.config import TableConfig
    from diffcdc.core.scope import ScopeConfig
    from diffcdc.engine.run import RunOptions, run_table
    from tests.support.scope_contract import assert_image, assert_once_scoped
    from tests.support.sink_kinds import KINDS
    from tests.support.workspace import PERMISSIVE

    root, state = str(tmp_path), str(tmp_path / "state")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
    images: dict[int, str] = {}

    def version(n: int, rules: dict[str, list[str]], rows: list[tuple], image: list[tuple]
                ) -> TableConfig:
        table = TableConfig(name="T", source=os.path.join(root, "source"), keys=["id"],
                            sinks=[kind.entry(root, servers) for kind in KINDS],
                            scope=ScopeConfig(columns=["region"]), normalize=rules)
        os.makedirs(table.source, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(
            [{"id": i, "region": r, "v": v} for i, r, v in rows], schema),
            os.path.join(table.source, f"{n}.parquet"))
        run_table(spark, table, state, RunOptions(quality=PERMISSIVE))
        images[n] = os.path.join(root, f"image{n}.parquet")
        pq.write_table(pa.Table.from_pylist(
            [{"id": i, "region": r, "v": v} for i, r, v in image], schema), images[n])
        assert TableState(state, "T").head().version == n
        return table

    first = [(1, "eu", "a"), (2, "us", "X"), (3, "us", "Q")]
    version(1, {}, first, first)
    # the re-fingerprint: 'a' to 'B' is a change under the rule of before, so published
    version(2, {"v": ["casefold"]}, [(1, "eu", "B")], [(1, "eu", "B"), *first[1:]])
    table = version(3, {"v": ["casefold"]}, [(2, "us", "X"), (3, "us", "R")],
                    [(1, "eu", "B"), (2, "us", "X"), (3, "us", "R")])
    counts = TableState(state, "T").head().record.counts
    assert (counts.updated, counts.kept) == (2, 1)
    assert_image(spark, table, state, images[3])
    assert_once_scoped(table, state, servers, KINDS, images)
