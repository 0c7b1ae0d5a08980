"""Read each engine's output back as a change set and compare it with the ground truth.

A change set is ``{"insert": ids, "update": ids, "delete": ids}`` (sorted int64 arrays). It is
summarised by counts and a SHA-1 per kind, so engines run in other processes (or other
invocations) can be compared without holding their key sets in memory together.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

KINDS = ("insert", "update", "delete")
_MARKERS = {0: "insert", 1: "update", 2: "delete", 4: "upsert"}
_CDF = {"insert": "insert", "update_postimage": "update", "delete": "delete"}


def read_changes(files: list[str], key: str = "id") -> dict[str, np.ndarray]:
    """Keys per kind from landing-style (``__rowMarker__``) or Delta CDF (``_change_type``) files.

    A landing file without a marker column is an initial load: every row is an INSERT.
    UPSERT markers (4) are reported as their own kind, so a mismatch with the truth shows.
    """
    parts: dict[str, list[np.ndarray]] = {}
    for path in files:
        names = pq.read_schema(path).names
        if "__rowMarker__" in names:
            table = pq.read_table(path, columns=[key, "__rowMarker__"])
            ids = table.column(key).to_numpy()
            marks = table.column("__rowMarker__").to_numpy()
            for code in np.unique(marks):
                parts.setdefault(_MARKERS.get(int(code), f"marker{code}"), []).append(
                    ids[marks == code]
                )
        elif "_change_type" in names:
            table = pq.read_table(path, columns=[key, "_change_type"])
            kinds = pc.cast(table.column("_change_type"), pa.string())
            for value in pc.unique(kinds).to_pylist():
                mask = pc.equal(kinds, value)
                parts.setdefault(_CDF.get(value, value), []).append(
                    table.column(key).filter(mask).to_numpy()
                )
        else:
            parts.setdefault("insert", []).append(
                pq.read_table(path, columns=[key]).column(key).to_numpy()
            )
    out = {kind: np.empty(0, dtype=np.int64) for kind in KINDS}
    for kind, arrays in parts.items():
        out[kind] = np.sort(np.concatenate(arrays).astype(np.int64))
    return out


def truth_changes(truth_path: str | None, cur: str, key: str = "id") -> dict[str, np.ndarray]:
    """Expected change set: the generator's truth file, or (first load) every key of ``cur``."""
    out = {kind: np.empty(0, dtype=np.int64) for kind in KINDS}
    if truth_path is None:
        files = [os.path.join(cur, f) for f in sorted(os.listdir(cur)) if f.endswith(".parquet")]
        out["insert"] = np.sort(
            np.concatenate([pq.read_table(f, columns=[key]).column(key).to_numpy() for f in files])
        )
        return out
    table = pq.read_table(truth_path)
    kinds = table.column("kind")
    for kind in KINDS:
        out[kind] = np.sort(table.column("id").filter(pc.equal(kinds, kind)).to_numpy())
    return out


def summarize(changes: dict[str, np.ndarray]) -> dict[str, Any]:
    """Counts, duplicate counts and a digest per kind."""
    out: dict[str, Any] = {}
    for kind, ids in sorted(changes.items()):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out[kind] = {
            "count": len(ids),
            "duplicates": int(len(ids) - len(np.unique(ids))) if len(ids) else 0,
            "sha1": hashlib.sha1(ids.tobytes()).hexdigest(),
        }
    return out


def compare(
    got: dict[str, np.ndarray], want: dict[str, np.ndarray], limit: int = 5
) -> dict[str, Any]:
    """Per kind: keys missing from ``got`` and extra in ``got`` (counts and a few examples)."""
    diff: dict[str, Any] = {}
    for kind in sorted(set(got) | set(want)):
        g = got.get(kind, np.empty(0, dtype=np.int64))
        w = want.get(kind, np.empty(0, dtype=np.int64))
        missing = np.setdiff1d(w, g, assume_unique=False)
        extra = np.setdiff1d(g, w, assume_unique=False)
        dups = len(g) - len(np.unique(g))
        if len(missing) or len(extra) or dups:
            diff[kind] = {
                "missing": len(missing),
                "extra": len(extra),
                "duplicates": int(dups),
                "missing_examples": missing[:limit].tolist(),
                "extra_examples": extra[:limit].tolist(),
            }
    return diff
