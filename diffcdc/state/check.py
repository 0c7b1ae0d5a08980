"""Check a committed state version against a snapshot, without Spark.

The state is trusted to say which rows are unchanged, so it is worth verifying independently:
:func:`check_state` reads the state's Parquet and the snapshot with pyarrow, recomputes every
snapshot row's fingerprint with the pure-Python reference
(:mod:`diffcdc.core.fingerprint_ref`) and compares, key by key, with the state's live rows
(``__diffcdc_change`` ≠ DELETE): keys on one side only, fingerprint mismatches, duplicate
keys, live rows whose ``__diffcdc_n`` is not 1, and the row counts.

Memory: each side is held as numpy arrays of 8 bytes per row per array (a 64-bit key digest,
one or two fingerprints) plus the sort's index; rows are read, hashed and dropped a batch at
a time. Keys are compared by their 64-bit digest; two different keys sharing a digest (odds
about n²/2⁶⁵, 3·10⁻⁶ at 10M keys) would show as a duplicate or a mismatch, never hide one.
Sample keys are read back by position in a second, key-only pass, only when something is off.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from diffcdc.core.normalize import NO_RULES, Normalizers
from diffcdc.state.check_read import (
    BATCH_ROWS,
    Side,
    StateSide,
    chain_batches,
    key_rows,
    read_snapshot,
    read_state,
    snapshot_batches,
)

SAMPLE_SIZE = 10
#: Problem kinds, in report order, with the side whose row shows the key.
PROBLEMS = {
    "fingerprint_mismatch": "snapshot",
    "missing_in_state": "snapshot",
    "missing_in_snapshot": "state",
    "duplicate_state_keys": "state",
    "duplicate_snapshot_keys": "snapshot",
}


@dataclass(frozen=True)
class StateCheckResult:
    """The outcome of :func:`check_state`: counts, sample keys per problem, time taken."""

    state_path: str
    snapshot_path: str
    bits: int
    state_rows: int  #: live rows in the state (tombstones not counted)
    tombstones: int
    snapshot_rows: int
    matched: int  #: keys on both sides, once each, same fingerprint
    fingerprint_mismatch: int  #: keys on both sides, once each, different fingerprints
    missing_in_state: int  #: snapshot keys without a live state row
    missing_in_snapshot: int  #: live state keys not in the snapshot
    duplicate_state_keys: int  #: keys with more than one live state row
    duplicate_snapshot_keys: int  #: keys with more than one snapshot row
    bad_row_counts: int  #: live state rows whose ``__diffcdc_n`` is not 1
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def problems(self) -> dict[str, int]:
        """Every non-zero problem count, by kind."""
        kinds = [*PROBLEMS, "bad_row_counts"]
        return {k: getattr(self, k) for k in kinds if getattr(self, k)}

    @property
    def ok(self) -> bool:
        """True when the state matches the snapshot exactly."""
        return not self.problems and self.state_rows == self.snapshot_rows == self.matched

    def summary(self) -> str:
        """One line: OK with the counts, or every problem with a sample key."""
        if self.ok:
            return (
                f"state OK: {self.matched:,} live keys match {self.snapshot_rows:,} snapshot "
                f"rows ({self.bits}-bit fingerprints, {self.tombstones:,} tombstones, "
                f"{self.seconds:.1f} s)"
            )
        parts = []
        for kind, count in self.problems.items():
            sample = self.samples.get(kind)
            parts.append(f"{count:,} {kind.replace('_', ' ')}" + (f" (e.g. {sample[0]})" if sample else ""))
        return (
            f"state MISMATCH: {'; '.join(parts)}; {self.state_rows:,} live state rows, "
            f"{self.snapshot_rows:,} snapshot rows, {self.matched:,} matched"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (sample values as the JSON encoder's ``default=str`` shows)."""
        return {**asdict(self), "ok": self.ok, "summary": self.summary()}


def check_state(
    state_path: str | Sequence[str],
    snapshot_path: str,
    *,
    keys: Sequence[str],
    exclude: Sequence[str] = (),
    bits: int = 64,
    snapshot_kind: str = "parquet",
    encoding: str = "utf-8",
    sample_size: int = SAMPLE_SIZE,
    batch_rows: int = BATCH_ROWS,
    normalize: Normalizers = NO_RULES,
) -> StateCheckResult:
    """Compare the state version at ``state_path`` with the snapshot it should describe.

    ``state_path`` is a state folder (``versions/<version>/state``, the commit record's
    ``state_path``) or a version's chain of them, base first (:mod:`diffcdc.state.chain`);
    ``snapshot_path`` a Parquet file or folder, or a CSV file with a header
    row (``snapshot_kind="csv"``, every column read as a string, empty fields NULL, as the
    engine reads CSV unless told to infer types). ``keys``, ``exclude`` and ``bits`` are the
    table's (the commit record has them), and ``normalize`` its normalizers.
    """
    state = read_state(state_path, keys, bits, batch_rows)
    return compare_with_snapshot(
        state, snapshot_path, exclude=exclude, bits=bits, snapshot_kind=snapshot_kind,
        encoding=encoding, sample_size=sample_size, batch_rows=batch_rows, normalize=normalize,
    )


def compare_with_snapshot(
    state: StateSide,
    snapshot_path: str,
    *,
    exclude: Sequence[str] = (),
    bits: int = 64,
    snapshot_kind: str = "parquet",
    encoding: str = "utf-8",
    sample_size: int = SAMPLE_SIZE,
    batch_rows: int = BATCH_ROWS,
    normalize: Normalizers = NO_RULES,
) -> StateCheckResult:
    """:func:`check_state` with the state side already read (see :func:`read_state`)."""
    started = time.monotonic()
    snapshot, snapshot_keys = read_snapshot(
        snapshot_path, snapshot_kind, state.key_columns, exclude, bits, batch_rows, encoding,
        normalize,
    )
    counts, positions = _compare(state.side, snapshot, sample_size)
    samples: dict[str, list[dict[str, Any]]] = {}
    if positions:
        wanted = {"state": [p for k, ps in positions.items() if PROBLEMS[k] == "state" for p in ps],
                  "snapshot": [p for k, ps in positions.items() if PROBLEMS[k] == "snapshot" for p in ps]}
        found = {
            "state": state_key_rows(state, wanted["state"], batch_rows),
            "snapshot": key_rows(
                snapshot_batches(snapshot_path, snapshot_kind, snapshot_keys, batch_rows, encoding),
                snapshot_keys, wanted["snapshot"]),
        }
        samples = {k: [found[PROBLEMS[k]][p] for p in ps] for k, ps in positions.items()}
    return StateCheckResult(
        state_path=state.path,
        snapshot_path=snapshot_path,
        bits=bits,
        state_rows=state.side.rows,
        tombstones=state.tombstones,
        snapshot_rows=snapshot.rows,
        bad_row_counts=state.bad_row_counts,
        samples=samples,
        seconds=round(time.monotonic() - started, 3),
        **counts,
    )


def state_key_rows(state: StateSide, positions: Sequence[int], batch_rows: int = BATCH_ROWS) -> dict[int, dict[str, Any]]:
    """The keys of the live state rows at ``positions`` (a second, key-only read)."""
    where = state.positions[np.asarray(positions, dtype=np.int64)] if len(positions) else []
    found = key_rows(chain_batches(state.chain, state.key_columns, batch_rows),
                     state.key_columns, where)
    return {p: found[int(w)] for p, w in zip(positions, where)}


def duplicate_keys(state: StateSide, sample_size: int = SAMPLE_SIZE) -> tuple[int, list[dict[str, Any]]]:
    """How many keys have more than one live state row, and a few of them."""
    _, first, rows = _groups(state.side)
    positions = np.sort(first[rows > 1])
    found = state_key_rows(state, positions[:sample_size].tolist())
    return len(positions), [found[p] for p in positions[:sample_size].tolist()]


def _groups(side: Side) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct key digests (sorted), the stream position of each one's first row, rows per key."""
    order = np.argsort(side.digests, kind="stable")
    digests = side.digests[order]
    starts = np.flatnonzero(np.concatenate(([True], digests[1:] != digests[:-1]))) if len(digests) else order
    counts = np.diff(np.append(starts, len(digests)))
    return digests[starts], order[starts], counts


def _compare(
    state: Side, snapshot: Side, sample_size: int
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Problem counts and, per problem, the stream positions of up to ``sample_size`` rows."""
    s_keys, s_pos, s_rows = _groups(state)
    p_keys, p_pos, p_rows = _groups(snapshot)
    at = np.searchsorted(s_keys, p_keys)
    found = np.zeros(len(p_keys), bool)
    if len(s_keys):
        found = s_keys[np.minimum(at, len(s_keys) - 1)] == p_keys
    si, pi = at[found], np.flatnonzero(found)  # the keys on both sides: state / snapshot group
    single = (s_rows[si] == 1) & (p_rows[pi] == 1)
    differs = np.zeros(len(si), bool)
    for s_fp, p_fp in zip(state.fps, snapshot.fps):
        differs |= s_fp[s_pos[si]] != p_fp[p_pos[pi]]
    in_snapshot = np.zeros(len(s_keys), bool)
    in_snapshot[si] = True
    rows = {
        "fingerprint_mismatch": p_pos[pi[single & differs]],
        "missing_in_state": p_pos[~found],
        "missing_in_snapshot": s_pos[~in_snapshot],
        "duplicate_state_keys": s_pos[s_rows > 1],
        "duplicate_snapshot_keys": p_pos[p_rows > 1],
    }
    counts = {k: len(v) for k, v in rows.items()}
    counts["matched"] = int(np.count_nonzero(single & ~differs))
    positions = {k: np.sort(v)[:sample_size].tolist() for k, v in rows.items() if len(v) and sample_size}
    return counts, positions
