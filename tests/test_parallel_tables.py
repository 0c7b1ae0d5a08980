"""Many tables in one run, several at once in one Spark application (``parallelism``)."""

from __future__ import annotations

import json
import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq

import diffcdc.engine.run as run_module
from diffcdc.cli.main import main
from diffcdc.engine.run import table_parallelism
from diffcdc.sinks.openmirroring.replay import replay
from diffcdc.storage.local import LocalStore

NAMES = ["A", "B", "Bad", "C", "D"]


def write(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def config(base, parallelism: int) -> str:
    text = f'[diffcdc]\nstate = "state"\nlanding = "landing"\nparallelism = {parallelism}\n'
    text += "[quality]\nmax_delete_ratio = 1.0\n"
    for name in NAMES:
        text += f'[tables.{name}]\nsource = "src/{name}"\nkeys = ["id"]\n'
    path = base / "diffcdc.toml"
    path.write_text(text)
    return str(path)


def test_tables_run_concurrently_each_on_its_own(spark, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    seen: dict[str, tuple[str, str | None]] = {}
    real = run_module.run_table

    def spy(spark_, table, *args, **kwargs):
        pool = spark_.sparkContext.getLocalProperty("spark.scheduler.pool")
        seen[table.name] = (threading.current_thread().name, pool)
        return real(spark_, table, *args, **kwargs)

    monkeypatch.setattr(run_module, "run_table", spy)
    for snapshot, shift in (("1.parquet", 0), ("2.parquet", 3)):
        for n, name in enumerate(NAMES):
            rows = [{"id": i, "v": f"{name}{i + shift}"} for i in range(shift, 20 + n + shift)]
            if name == "Bad" and shift:
                rows.append(rows[0])  # a duplicate key: this table alone is refused
            write(str(tmp_path / "src" / name / snapshot), rows)
        code = main(["run", "--config", config(tmp_path, 3), "--json", "--quiet"])
        doc = json.loads(capsys.readouterr().out)
        assert [t["table"] for t in doc["tables"]] == NAMES  # the config's order
        assert code == (3 if shift else 0)
    outcome = {t["table"]: t["outcome"] for t in doc["tables"]}
    assert outcome == {"A": "ok", "B": "ok", "Bad": "failed", "C": "ok", "D": "ok"}
    assert len({thread for thread, _ in seen.values()}) > 1
    assert {pool for _, pool in seen.values()} == {f"diffcdc-{n}" for n in NAMES}
    for n, name in enumerate(NAMES):
        got = replay(LocalStore(str(tmp_path / "landing")), name).replayed().rows
        last = 1 if name == "Bad" else 2
        want = pq.read_table(str(tmp_path / "src" / name / f"{last}.parquet")).to_pylist()
        assert sorted(r["id"] for r in got) == sorted(r["id"] for r in want), name
        assert sorted(got, key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"]), name


def test_default_parallelism_follows_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert table_parallelism(None) == 2
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert table_parallelism(None) == 8
    assert table_parallelism(1) == 1
