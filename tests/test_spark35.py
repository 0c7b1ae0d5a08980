"""Classic PySpark 3.5 and 4.x run one table in turn, on one state, without a fork of the code.

The 3.5 side is the environment ``bash .ci/install spark35`` makes (tests/support/spark35.py
finds it; missing, these tests skip, and fail in CI). Its pyspark went in before diffcdc, which
was installed without the ``spark`` extra: pip must have left it in place. Then one table with
every sink kind runs snapshot 1 on 3.5, snapshot 2 on 4.x (this process's PySpark) over the
state 3.5 wrote, and snapshot 3 on 3.5 again over the state 4.x wrote, each a real ``diffcdc
run`` process. After every step each sink's output replays to that snapshot exactly, and the
fingerprints in the state are the ones this 4.x session computes for the snapshot's rows; the
golden rows' fingerprints computed on 3.5 are 4.x's and the pinned ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pyarrow.parquet as pq
import pytest

from diffcdc.config import TableConfig
from diffcdc.core.classify import CHANGE, DELETE
from diffcdc.core.fingerprint import FP, FP_HI, fingerprint_exprs
from diffcdc.engine.verify import verify_table
from diffcdc.spark.version import parse
from diffcdc.state.chain import state_chain
from diffcdc.state.store import TableState
from tests.support.config_text import toml_value
from tests.support.fingerprint_golden import GOLDEN_FINGERPRINTS, golden_fingerprints
from tests.support.sink_kinds import KINDS
from tests.support.snapshots import row, snapshot_one, snapshot_two, write_snapshot
from tests.support.spark35 import ROOT, checkout_env, spark35_python

pytestmark = pytest.mark.slow
KEYS = ["k1", "k2"]


def _versions(python: str) -> dict[str, Any]:
    """What ``python`` imports: pyspark's version (module and installed distribution), diffcdc's
    installed distribution and the folder of the diffcdc package it imports."""
    script = ("import importlib.metadata as m, json, os, pyspark, diffcdc; print(json.dumps("
              "{'pyspark': pyspark.__version__, 'pyspark_dist': m.version('pyspark'), "
              "'diffcdc_dist': m.version('diffcdc'), 'diffcdc': os.path.dirname(diffcdc.__file__)}))")
    done = subprocess.run([python, "-c", script], env=checkout_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.spark35_smoke
def test_the_spark35_environment_keeps_the_pyspark_installed_before_diffcdc():
    python = spark35_python()
    found = _versions(python)
    # diffcdc is installed there (without the `spark` extra) and pip left PySpark 3.5 in place.
    assert parse(found["pyspark"]) == (3, 5) and found["pyspark_dist"] == found["pyspark"], found
    assert found["diffcdc_dist"], found
    if os.path.realpath(sys.prefix) == os.path.realpath(os.path.dirname(os.path.dirname(python))):
        import pyspark  # the smoke tier itself runs in that environment: on that PySpark

        assert pyspark.__version__ == found["pyspark"]


def _config(root: str, servers: dict[str, Any]) -> str:
    lines = [f"[diffcdc]\nstate = {json.dumps(os.path.join(root, 'state'))}\n",
             "[quality]\nmin_row_ratio = 0.0\nmax_delete_ratio = 1.0\n",
             f"[tables.T]\nsource = {json.dumps(os.path.join(root, 'source'))}\n"
             f"keys = {json.dumps(KEYS)}\nfingerprint_bits = 128\n"]
    for kind in KINDS:
        lines.append("[[tables.T.sinks]]")
        for key, value in kind.entry(root, servers).items():
            lines.append(f"{key} = {toml_value(value)}")
        lines.append("")
    path = os.path.join(root, "diffcdc.toml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    return path


def _run(python: str, config: str) -> None:
    done = subprocess.run(
        [python, "-m", "diffcdc.cli", "run", "--quiet", "--config", config, "--master", "local[1]"],
        env=checkout_env(), capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, (python, done.stdout[-2000:], done.stderr[-3000:])


def _state_fingerprints(state: TableState) -> dict[tuple[Any, ...], tuple[int, int]]:
    """The head's state: its chain's folders, base first, the newest row of a key winning (a
    tombstone: the key is gone)."""
    head = state.head()
    assert head is not None and head.record.fingerprint.bits == 128
    newest: dict[tuple[Any, ...], Any] = {}
    for link in state_chain(state.commits()):
        for r in pq.read_table(state.abspath(link.path)).to_pylist():
            newest[(r["k1"], r["k2"])] = None if r.get(CHANGE) == DELETE else (r[FP], r[FP_HI])
    return {k: v for k, v in newest.items() if v is not None}


def _snapshot_fingerprints(spark, path: str) -> dict[tuple[Any, ...], tuple[int, int]]:
    df = spark.read.parquet(path)
    rows = df.select(*KEYS, *fingerprint_exprs(df.schema, KEYS, bits=128)).collect()
    return {(r["k1"], r["k2"]): (r[FP], r[FP_HI]) for r in rows}


def snapshot_three() -> dict:
    """From snapshot two: NULL swaps, deletes, a changed key back and new keys."""
    rows = snapshot_two()
    for i in range(7, 10):
        rows[(i, "a")] = {**rows[(i, "a")], "s1": rows[(i, "a")]["s2"], "s2": rows[(i, "a")]["s1"]}
    for i in (11, 12):
        del rows[(i, "a")]
    rows[(6, "a")] = rows.pop((60, "a"))
    rows[(100, "é")] = row(100, "")
    return rows


def test_state_written_on_spark35_is_read_on_spark4_and_back(spark, servers, tmp_path):
    spark35 = spark35_python()
    assert parse(_versions(spark35)["pyspark"]) == (3, 5)
    here = _versions(sys.executable)
    if parse(here["pyspark"])[0] != 4:
        pytest.skip(f"the other side must be PySpark 4.x; this suite runs on {here['pyspark']}")

    root = str(tmp_path)
    config = _config(root, servers)
    source = os.path.join(root, "source")
    state = TableState(os.path.join(root, "state"), "T")
    table = TableConfig(name="T", source=source, keys=KEYS, fingerprint_bits=128,
                        sinks=[kind.entry(root, servers) for kind in KINDS])
    steps = [("1.parquet", snapshot_one(), spark35), ("2.parquet", snapshot_two(), sys.executable),
             ("3.parquet", snapshot_three(), spark35)]
    for i, (sid, rows, python) in enumerate(steps):
        write_snapshot(source, sid, rows, seed=i)
        _run(python, config)
        head = state.head()
        assert head is not None and head.snapshot_id == sid and head.published, python
        results = verify_table(spark, table, os.path.join(root, "state"), os.path.join(source, sid))
        bad = {k: r.to_dict() for k, r in results.items() if not r.identical}
        assert not bad and len(results) == len(KINDS), (python, bad)
        assert _state_fingerprints(state) == _snapshot_fingerprints(spark, os.path.join(source, sid)), python
    for kind, sink in zip(KINDS, table.sinks):
        kind.assert_once(state, sink.sink_id, servers)

    # The golden rows, every type: 3.5 computes the fingerprints 4.x computes, the pinned ones.
    script = ("import json; from diffcdc.spark.session import build_spark; "
              "from tests.support.fingerprint_golden import golden_fingerprints; "
              "print(json.dumps(golden_fingerprints(build_spark('local[1]'))))")
    done = subprocess.run([spark35, "-c", script], cwd=ROOT, env=checkout_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    on_35 = [tuple(fp) for fp in json.loads(done.stdout.strip().splitlines()[-1])]
    assert on_35 == golden_fingerprints(spark) == GOLDEN_FINGERPRINTS
