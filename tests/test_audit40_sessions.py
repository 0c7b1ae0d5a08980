"""Issue 40's per-session state attacked as a notebook does: a SparkSession stopped and another
built in the same process (a re-run), and a second session beside the first. Every run is exact
(the landing files, read with pyarrow, replay to the last snapshot) and nothing a stopped session
had stays in a cache (diffcdc's own per-session caches, the Parquet footer classes included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_NOTEBOOK = textwrap.dedent("""
    import json, os, sys
    import pyarrow as pa, pyarrow.parquet as pq
    from diffcdc.config import RunConfig, TableConfig
    from diffcdc.engine.run import run_many
    from diffcdc.spark.session import build_spark
    from diffcdc import staged_files
    from diffcdc.sources import parquet_schema

    base = sys.argv[1]
    config = RunConfig(state=base + "/state", tables=[TableConfig(
        name="T", source=base + "/src", keys=["id"], landing=base + "/landing")])
    caches = {"paths": staged_files._PATH_CLASSES, "footers": parquet_schema._CLASSES}

    def night(n, ids, values):
        os.makedirs(f"{base}/src/000{n}")
        pq.write_table(pa.table({"id": ids, "v": values}), f"{base}/src/000{n}/part.parquet")

    def run(spark):
        return [(r.exit_code, r.error) for r in run_many(spark, config)]

    def build():
        return build_spark(master="local[1]", conf={"spark.sql.shuffle.partitions": "1"},
                           app_name="notebook")

    facts = {}
    night(1, [1, 2, 3], ["a", "b", "c"])
    first = build()
    facts["first"] = run(first)
    facts["first_cached"] = {k: [s is first for s, _ in c.items()] for k, c in caches.items()}
    first.stop()
    facts["after_stop"] = {k: len(c) for k, c in caches.items()}
    night(2, [2, 3, 4], ["b", "c2", "d"])
    second = build()
    facts["new_session"] = second is not first
    facts["second"] = run(second)
    beside = second.newSession()  # two sessions at once
    night(3, [3, 4, 5], ["c2", "d", "e"])
    facts["beside"] = run(beside)
    facts["both_cached"] = {k: sorted((s is second, s is beside) for s, _ in c.items())
                            for k, c in caches.items()}
    second.stop()
    print(json.dumps(facts))
""")


def _replay(landing: str) -> dict[int, str]:
    """The rows the landing files give, applied in order (docs/landing.md's row markers)."""
    rows: dict[int, str] = {}
    for name in sorted(n for n in os.listdir(landing) if n.endswith(".parquet")):
        for row in pq.read_table(os.path.join(landing, name)).to_pylist():
            marker = row.pop("__rowMarker__", 0)
            if marker == 2:
                del rows[row["id"]]  # a delete of a key the mirror lacks fails here
                continue
            assert marker in (0, 1, 4) and (marker != 0 or row["id"] not in rows)
            assert marker != 1 or row["id"] in rows
            rows[row["id"]] = row["v"]
    return rows


@pytest.mark.slow
def test_a_notebook_rerun_and_a_second_session_are_exact_and_keep_nothing_stopped(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", _NOTEBOOK, str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {
        "first": [[0, None]],
        "first_cached": {"paths": [True], "footers": [True]},
        "after_stop": {"paths": 0, "footers": 0},  # the stopped session keeps nothing
        "new_session": True,
        "second": [[0, None]],
        "beside": [[0, None]],
        "both_cached": {"paths": [[False, True], [True, False]],
                        "footers": [[False, True], [True, False]]},
    }, done.stderr[-3000:]
    assert _replay(str(tmp_path / "landing" / "T")) == {3: "c2", 4: "d", 5: "e"}
