"""Normalizers through a Spark Connect server (issue 41.4), from a client process without Java:
the ``json`` rule's Python UDF is registered on the server's session and runs in its Python
workers; every rule gives the same fingerprints there as in a classic session (the state is
checked with the reference), and noise the rules remove publishes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from diffcdc.config import TableConfig
from diffcdc.state.store import TableState
from diffcdc.state.verify import verify_head
from tests.support.config_text import table_toml
from tests.support.connect_server import client_env
from tests.support.contract import assert_replays
from tests.support.normalized_rows import KEYS, RULES, snapshot_rows, write_snapshot

pytestmark = [pytest.mark.slow, pytest.mark.connect]


def _rows(noise: int, changed: bool = False) -> list[dict]:
    return snapshot_rows({(i % 3, "ab"[i % 2]): ((i, 1 + (i + noise) % 3),
                                                 (i + (changed and i == 4), 1 + (i + noise) % 3),
                                                 (i, 1 + (i + noise + 1) % 3),
                                                 (i, 1 + (i + noise + 2) % 3))
                          for i in range(6)})


def test_every_rule_runs_through_a_connect_server(spark, connect_server, tmp_path):
    root = str(tmp_path)
    table = TableConfig(name="T", source=os.path.join(root, "source"), keys=list(KEYS),
                        landing=os.path.join(root, "landing"), normalize=RULES)
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(table_toml(table, os.path.join(root, "state"), spark={"remote": connect_server.url},
                           fields={"normalize": RULES}))
    for i, rows in enumerate([_rows(0), _rows(1, changed=True)]):
        write_snapshot(root, f"{i + 1}.parquet", rows)
    done = subprocess.run([sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--json",
                           "--config", config], cwd=root, env=client_env(root),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    snaps = json.loads(done.stdout)["tables"][0]["snapshots"]
    # every row respelled in the second, one note really changed
    assert [(s["inserted"], s["updated"], s["deleted"]) for s in snaps] == [(6, 0, 0), (0, 1, 0)]
    assert_replays(spark, table, os.path.join(root, "state"), "2.parquet")
    assert verify_head(TableState(os.path.join(root, "state"), "T")).ok
