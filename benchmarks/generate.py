"""Deterministic snapshot generator: N rows x 10 columns, then later snapshots with a chosen
mix of updates, deletes, inserts and key changes, written as Parquet part files.

Layout written under ``--out``::

    snap-001/part-00000.parquet ...    first snapshot, ids 1..N
    snap-002/part-00000.parquet ...    derived from snap-001 (one part per part of the previous)
    truth-002.parquet                  (id, kind) of every expected change: insert/update/delete
    truth.json                         parameters and expected change counts per snapshot

Everything is numpy/pyarrow vectorized and done one part file at a time, so 20M rows need a few
hundred MB of memory. The same seed, sizes and rates always give byte-identical data.

A key change moves a row to a new id (values unchanged): one DELETE of the old id plus one
INSERT of the new id, as every snapshot diff (and the Open Mirroring spec) sees it. An update
changes one or two non-key columns to a value guaranteed to differ (NULL <-> value included).

    python -m benchmarks.generate --rows 1000000 --out benchmarks/data/demo \
        --updates 0.01 --deletes 0.005 --inserts 0.005 --key-changes 0.001 --snapshots 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

KEY = "id"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64()),
        pa.field("quantity", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("city", pa.string()),
        pa.field("amount", pa.decimal128(18, 2)),
        pa.field("score", pa.float64()),
        pa.field("order_date", pa.date32()),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
        pa.field("active", pa.bool_()),
    ]
)
VALUE_COLUMNS = [f.name for f in SCHEMA if f.name != KEY]
CITIES = pa.array(
    [
        "Bellevue",
        "Redmond",
        "Seattle",
        "Tacoma",
        "Olympia",
        "Spokane",
        "Yakima",
        "Everett",
        "Kent",
        "Renton",
        "Auburn",
        "Bothell",
        "Kirkland",
        "Issaquah",
        "Lynnwood",
        "Bremerton",
    ]
)
EPOCH_2020_DAYS = 18262
EPOCH_2020_US = EPOCH_2020_DAYS * 86_400_000_000
ROW_GROUP_ROWS = 131_072  # several row groups per part: Spark and DuckDB can split a file


@dataclass(frozen=True)
class Rates:
    """Fractions of the previous snapshot's row count."""

    updates: float = 0.01
    deletes: float = 0.005
    inserts: float = 0.005
    key_changes: float = 0.001

    def check(self) -> None:
        removed = self.updates + self.deletes + self.key_changes
        if min(asdict(self).values()) < 0 or removed > 1:
            raise ValueError(f"rates must be >= 0 and updates+deletes+key_changes <= 1: {self}")


def _decimal(cents: np.ndarray) -> pa.Array:
    """decimal128(18,2) from unscaled int64 cents, without Python objects."""
    words = np.stack([cents, cents >> 63], axis=1).ravel()
    return pa.Array.from_buffers(pa.decimal128(18, 2), len(cents), [None, pa.py_buffer(words)])


def _cents(arr: pa.Array) -> np.ndarray:
    """Unscaled low words of a null-free decimal128 array (values fit in int64 here)."""
    words = np.frombuffer(arr.buffers()[1], dtype=np.int64)
    return words[2 * arr.offset : 2 * (arr.offset + len(arr)) : 2].copy()


def _with_nulls(
    values: np.ndarray, rng: np.random.Generator, rate: float, typ: pa.DataType
) -> pa.Array:
    return pa.array(values, type=typ, mask=rng.random(len(values)) < rate)


def make_rows(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """Fresh rows for the given ids."""
    n = len(ids)
    name_num = rng.integers(0, 10**9, n)
    names = pc.binary_join_element_wise("name-", pc.cast(pa.array(name_num), pa.string()), "")
    names = pc.if_else(pa.array(rng.random(n) < 0.05), pa.scalar(None, pa.string()), names)
    city_idx = pa.array(rng.integers(0, len(CITIES), n), mask=rng.random(n) < 0.10)
    columns = [
        pa.array(ids, pa.int64()),
        pa.array(rng.integers(1, 1_000_000, n), pa.int64()),
        pa.array(rng.integers(0, 1000, n).astype(np.int32), pa.int32()),
        names,
        CITIES.take(city_idx),
        _decimal(rng.integers(-10_000_000, 100_000_000, n)),
        _with_nulls(np.round(rng.normal(50.0, 20.0, n), 6), rng, 0.02, pa.float64()),
        pa.array((EPOCH_2020_DAYS + rng.integers(0, 2000, n)).astype(np.int32), pa.date32()),
        pa.array(
            EPOCH_2020_US + rng.integers(0, 2000 * 86_400_000_000, n),
            SCHEMA.field("updated_at").type,
        ),
        _with_nulls(rng.random(n) < 0.5, rng, 0.03, pa.bool_()),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def change_rows(rows: int, seed: int) -> pa.Table:
    """``rows`` change rows as a sink receives them: the generator's columns plus the change
    kind (diffcdc's ``OP`` column), 70% inserts, 20% updates, 10% deletes (NULL outside the key)."""
    from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE

    rng = np.random.default_rng(seed)
    table = make_rows(np.arange(1, rows + 1, dtype=np.int64), rng)
    draw = rng.random(rows)
    ops = np.where(draw < 0.7, OP_INSERT, np.where(draw < 0.9, OP_UPDATE, OP_DELETE)).astype(np.int32)
    deleted = pa.array(ops == OP_DELETE)
    columns = [table.column(0)] + [
        pc.if_else(deleted, pa.scalar(None, col.type), col) for col in table.columns[1:]
    ]
    return pa.Table.from_arrays([*columns, pa.array(ops)], names=[*table.column_names, OP])


def _changed(name: str, old: pa.Array, rng: np.random.Generator) -> pa.Array:
    """A value different from ``old`` in every row (NULL <-> value changes included)."""
    n = len(old)
    k = rng.integers(0, 1000, n)
    to_null = pa.array(rng.random(n) < 0.2)
    null = pa.scalar(None, old.type)
    if name == "customer_id":
        return pc.add(old, pa.array(1 + k))
    if name == "quantity":
        return pa.array(((old.to_numpy(zero_copy_only=False) + 1 + k) % 1001).astype(np.int32))
    if name == "name":
        fresh = pc.binary_join_element_wise("new-", pc.cast(pa.array(k), pa.string()), "")
        return pc.if_else(
            pc.is_null(old),
            fresh,
            pc.if_else(to_null, null, pc.binary_join_element_wise(old, "~", "")),
        )
    if name == "city":
        cand = CITIES.take(pa.array(k % len(CITIES)))
        alt = CITIES.take(pa.array((k + 1) % len(CITIES)))
        other = pc.if_else(pc.fill_null(pc.equal(cand, old), False), alt, cand)
        return pc.if_else(pc.is_null(old), other, pc.if_else(to_null, null, other))
    if name == "amount":
        return _decimal(_cents(old) + 1 + k)
    if name == "score":
        bumped = pc.add(old, pa.array(0.5 + k))
        return pc.if_else(pc.is_null(old), pa.array(k * 0.25), pc.if_else(to_null, null, bumped))
    if name == "order_date":
        days = pc.cast(old, pa.int32()).to_numpy(zero_copy_only=False) + 1 + k % 30
        return pa.array(days.astype(np.int32), pa.date32())
    if name == "updated_at":
        micros = pc.cast(old, pa.int64()).to_numpy(zero_copy_only=False) + 1 + k * 1_000_003
        return pa.array(micros, old.type)
    if name == "active":
        return pc.if_else(pc.is_null(old), True, pc.if_else(to_null, null, pc.invert(old)))
    raise ValueError(name)


def _apply_updates(table: pa.Table, upd: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = table.num_rows
    first = rng.integers(0, len(VALUE_COLUMNS), n)
    second = np.where(rng.random(n) < 0.25, rng.integers(0, len(VALUE_COLUMNS), n), -1)
    for j, name in enumerate(VALUE_COLUMNS):
        mask = upd & ((first == j) | (second == j))
        if not mask.any():
            continue
        old = table.column(name).combine_chunks()
        idx = np.flatnonzero(mask)
        new_vals = _changed(name, old.take(pa.array(idx)), rng)
        col = pc.replace_with_mask(old, pa.array(mask), new_vals.cast(old.type))
        table = table.set_column(table.schema.get_field_index(name), SCHEMA.field(name), col)
    return table


def _write(table: pa.Table, path: str) -> None:
    pq.write_table(table, path, compression="snappy", row_group_size=ROW_GROUP_ROWS)


def generate_base(out_dir: str, rows: int, seed: int, chunk_rows: int = 1_000_000) -> dict:
    """Write snapshot 1 (ids 1..rows) as part files into ``out_dir``; return its description."""
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for part, start in enumerate(range(0, max(rows, 1), chunk_rows)):
        ids = np.arange(start + 1, min(start + chunk_rows, rows) + 1, dtype=np.int64)
        rng = np.random.default_rng([seed, 1, part])
        _write(make_rows(ids, rng), os.path.join(tmp, f"part-{part:05d}.parquet"))
    os.replace(tmp, out_dir)
    return {"snapshot": os.path.basename(out_dir), "rows": rows, "next_id": rows + 1}


def generate_next(
    prev_dir: str, out_dir: str, truth_path: str, rates: Rates, seed: int, index: int, next_id: int
) -> dict:
    """Derive the next snapshot from ``prev_dir`` part by part; write changes to ``truth_path``."""
    rates.check()
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    counts = {"updates": 0, "deletes": 0, "inserts": 0, "key_changes": 0, "rows": 0}
    truth_schema = pa.schema([("id", pa.int64()), ("kind", pa.string())])
    writer = pq.ParquetWriter(truth_path + ".tmp", truth_schema)
    parts = sorted(p for p in os.listdir(prev_dir) if p.endswith(".parquet"))
    for part, name in enumerate(parts):
        table = pq.read_table(os.path.join(prev_dir, name)).cast(SCHEMA)
        rng = np.random.default_rng([seed, index, part])
        n = table.num_rows
        u = rng.random(n)
        dele = u < rates.deletes
        keyc = (u >= rates.deletes) & (u < rates.deletes + rates.key_changes)
        upd = (u >= rates.deletes + rates.key_changes) & (
            u < rates.deletes + rates.key_changes + rates.updates
        )
        table = _apply_updates(table, upd, rng)
        ids = table.column(KEY).to_numpy()
        moved = table.filter(pa.array(keyc))
        new_keys = np.arange(next_id, next_id + moved.num_rows, dtype=np.int64)
        next_id += moved.num_rows
        moved = moved.set_column(0, SCHEMA.field(KEY), pa.array(new_keys, pa.int64()))
        n_ins = int(rng.binomial(n, rates.inserts)) if n else 0
        ins_ids = np.arange(next_id, next_id + n_ins, dtype=np.int64)
        next_id += n_ins
        kept = table.filter(pa.array(~(dele | keyc)))
        out = pa.concat_tables([kept, moved, make_rows(ins_ids, rng)])
        _write(out, os.path.join(tmp, f"part-{part:05d}.parquet"))
        truth = {
            "insert": np.concatenate([new_keys, ins_ids]),
            "update": ids[upd],
            "delete": np.concatenate([ids[dele], ids[keyc]]),
        }
        for kind, kids in truth.items():
            if len(kids):
                writer.write_table(
                    pa.table({"id": kids, "kind": pa.array([kind] * len(kids))}, truth_schema)
                )
        counts["updates"] += int(upd.sum())
        counts["deletes"] += int(dele.sum())
        counts["key_changes"] += int(keyc.sum())
        counts["inserts"] += n_ins
        counts["rows"] += out.num_rows
    writer.close()
    os.replace(truth_path + ".tmp", truth_path)
    os.replace(tmp, out_dir)
    expected = {
        "insert": counts["inserts"] + counts["key_changes"],
        "update": counts["updates"],
        "delete": counts["deletes"] + counts["key_changes"],
    }
    return {
        "snapshot": os.path.basename(out_dir),
        "generated": counts,
        "expected": expected,
        "truth": os.path.basename(truth_path),
        "next_id": next_id,
    }


def link_tree(src: str, dst: str) -> None:
    """Hard-link (copy where links fail) the files of folder ``src`` into a new folder ``dst``."""
    os.makedirs(dst)
    for name in sorted(os.listdir(src)):
        try:
            os.link(os.path.join(src, name), os.path.join(dst, name))
        except OSError:
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


def cached_base(folder: str, rows: int, seed: int, chunk_rows: int = 1_000_000) -> dict:
    """Snapshot 1 in ``folder``/snap-001, generated once and shared by every scenario."""
    params = {
        "rows": rows,
        "seed": seed,
        "chunk_rows": chunk_rows,
        "row_group_rows": ROW_GROUP_ROWS,
        "generator_version": 1,
    }
    meta_path = os.path.join(folder, "base.json")
    if os.path.exists(meta_path):
        with open(meta_path) as handle:
            meta = json.load(handle)
        if meta.get("params") == params:
            return meta["info"]
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    info = generate_base(os.path.join(folder, "snap-001"), rows, seed, chunk_rows)
    with open(meta_path, "w") as handle:
        json.dump({"params": params, "info": info}, handle, indent=2)
    return info


def generate(
    out: str,
    rows: int,
    seed: int = 42,
    rates: Rates = Rates(),
    snapshots: int = 2,
    chunk_rows: int = 1_000_000,
    base_cache: str | None = None,
) -> dict:
    """Write snapshots 1..``snapshots`` and ground truth under ``out``; reuse if already there.

    ``base_cache``: a folder where snapshot 1 is generated once and hard-linked from, so
    scenarios of the same size and seed share it.
    """
    params = {
        "rows": rows,
        "seed": seed,
        "rates": asdict(rates),
        "snapshots": snapshots,
        "chunk_rows": chunk_rows,
        "row_group_rows": ROW_GROUP_ROWS,
        "generator_version": 1,
    }
    meta_path = os.path.join(out, "truth.json")
    if os.path.exists(meta_path):
        with open(meta_path) as handle:
            meta = json.load(handle)
        if meta.get("params") == params:
            return meta
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    started = time.perf_counter()
    if base_cache:
        info = cached_base(base_cache, rows, seed, chunk_rows)
        link_tree(os.path.join(base_cache, "snap-001"), os.path.join(out, "snap-001"))
    else:
        info = generate_base(os.path.join(out, "snap-001"), rows, seed, chunk_rows)
    meta = {"params": params, "key": KEY, "snapshots": [info]}
    next_id = info["next_id"]
    for index in range(2, snapshots + 1):
        info = generate_next(
            os.path.join(out, f"snap-{index - 1:03d}"),
            os.path.join(out, f"snap-{index:03d}"),
            os.path.join(out, f"truth-{index:03d}.parquet"),
            rates,
            seed,
            index,
            next_id,
        )
        next_id = info["next_id"]
        meta["snapshots"].append(info)
    meta["seconds"] = round(time.perf_counter() - started, 3)
    with open(meta_path + ".tmp", "w") as handle:
        json.dump(meta, handle, indent=2)
    os.replace(meta_path + ".tmp", meta_path)
    return meta


#: The scenarios of the benchmarks (rates are fractions of snapshot 1's rows; None: a first load).
SCENARIOS: dict[str, Rates | None] = {
    "steady": Rates(updates=0.01, deletes=0.005, inserts=0.005, key_changes=0.001),
    "first-load": None,
    "zero": Rates(updates=0.0, deletes=0.0, inserts=0.0, key_changes=0.0),
    "half": Rates(updates=0.40, deletes=0.05, inserts=0.05, key_changes=0.0),
}


def prepare(
    data_root: str, rows: int, scenario: str, seed: int
) -> tuple[str | None, str, str | None]:
    """Generate (or reuse) the files of one scenario; return (prev, cur, truth parquet)."""
    base = os.path.join(data_root, f"n{rows}-s{seed}", "base")
    rates = SCENARIOS[scenario]
    if rates is None:
        cached_base(base, rows, seed)
        return None, os.path.join(base, "snap-001"), None
    out = os.path.join(data_root, f"n{rows}-s{seed}", scenario)
    generate(out, rows, seed, rates, snapshots=2, base_cache=base)
    return (
        os.path.join(out, "snap-001"),
        os.path.join(out, "snap-002"),
        os.path.join(out, "truth-002.parquet"),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--snapshots", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=1_000_000)
    for field, default in asdict(Rates()).items():
        parser.add_argument("--" + field.replace("_", "-"), type=float, default=default)
    args = parser.parse_args(argv)
    rates = Rates(args.updates, args.deletes, args.inserts, args.key_changes)
    meta = generate(args.out, args.rows, args.seed, rates, args.snapshots, args.chunk_rows)
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
