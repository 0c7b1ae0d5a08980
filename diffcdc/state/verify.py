"""The full check of a table's head state (``diffcdc verify --state``), without Spark.

:func:`verify_head` runs a list of checks, each a :class:`Check` (a name, ``ok`` / ``failed``
/ ``skipped``, one line of detail, data for ``--json``); a new check is one more function
returning a :class:`Check`, appended in :func:`verify_head`:

1. ``files`` — every state file of the head's chain (its base and deltas, see
   :mod:`diffcdc.state.chain`) against its commit's manifest (sizes, footer row counts,
   XXH3-128 checksums; see :mod:`diffcdc.state.integrity`). A damaged state stops here.
2. ``rows`` — the chain is read and resolved: the live rows and the head folder's tombstones
   equal the commit's counts (the head folder's rows its manifest's), live keys are unique,
   every live row has
   ``__diffcdc_n`` = 1 and a fingerprint.
3. ``fingerprints`` — when the head's snapshot is still there, unchanged: every snapshot row's
   fingerprint computed by the pure-Python reference (:mod:`diffcdc.core.fingerprint_ref`)
   equals the state's, key by key. A snapshot that is gone or was rewritten since the commit
   skips this check (and says so): the structural checks still ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

from diffcdc.core.classify import DUP
from diffcdc.errors import DiffcdcError, StateError
from diffcdc.state.chain import state_chain
from diffcdc.state.check import StateCheckResult, check_state, compare_with_snapshot, duplicate_keys
from diffcdc.state.check_read import StateSide, read_state
from diffcdc.state.commit import CommitRecord
from diffcdc.state.guard import state_damage
from diffcdc.state.store import Commit, TableState

Status = Literal["ok", "failed", "skipped"]
#: Whether the snapshot at a path is still the files whose identity a commit recorded (the
#: source's answer: :func:`diffcdc.sources.registry.same_snapshot`; raises a ``DiffcdcError`` when
#: it cannot be read). The state keeps the identity without knowing its shape.
SameSnapshot = Callable[[str, Sequence[Mapping[str, Any]]], bool]


@dataclass(frozen=True)
class Check:
    """One check of the head state: its name, outcome and one line saying what it found."""

    name: str
    status: Status
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """False only when the check found something wrong (a skipped check is not a failure)."""
        return self.status != "failed"


@dataclass(frozen=True)
class HeadReport:
    """Every check of one table's head version."""

    table: str
    version: int | None  #: None: the table has no committed version
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "table": self.table, "version": self.version,
                "checks": [asdict(c) for c in self.checks]}


def verify_head(state: TableState, *, csv_encoding: str = "utf-8",
                same_snapshot: SameSnapshot | None = None) -> HeadReport:
    """Check the head version of ``state`` (see the module docstring); ``same_snapshot``
    proves the head's snapshot unchanged (None: its identity is not checked)."""
    head = state.head()
    if head is None:
        return HeadReport(state.table, None, (Check("head", "skipped", "no committed version yet"),))
    record, commits = head.record, state.commits()
    checks = [check_files(state, commits, record)]
    if checks[-1].ok:
        chain = [state.abspath(link.path) for link in state_chain(commits, record.version)]
        try:
            side = read_state(chain, record.keys, record.fingerprint.bits)
        except (DiffcdcError, OSError, pa.ArrowException) as exc:
            checks.append(Check("rows", "failed", f"the state cannot be read: {_line(exc)}"))
        else:
            checks.append(check_rows(record, side))
            checks.append(check_fingerprints(record, side, csv_encoding, same_snapshot))
    return HeadReport(state.table, record.version, tuple(checks))


def check_files(state: TableState, commits: list[Commit], record: CommitRecord) -> Check:
    """The state files of every link of the version's chain against their commits' manifests
    (checksums included)."""
    found = state_damage(state, commits, record.version, checksums=True)
    where = f"version {record.version}: "
    if found is not None:
        link, damage = found
        if link.version != record.version:
            where += f"its state builds on version {link.version}, whose "
        return Check("files", "failed", where + f"{damage.reason}: {damage.path}",
                     {"path": damage.path, "reason": damage.reason, "version": link.version})
    chain = state_chain(commits, record.version)
    listed = [link.manifest for link in chain if link.manifest is not None]
    parts = f" in {len(chain)} state folders (a base and {len(chain) - 1} deltas)" if len(chain) > 1 else ""
    if len(listed) < len(chain):
        return Check("files", "ok", where + f"readable{parts} (committed before manifests: no "
                     "checksums to compare)")
    files = sum(len(m.files) for m in listed)
    return Check("files", "ok", where + f"{files} file(s){parts} match the commits' sizes, row "
                 "counts and checksums")


def check_rows(record: CommitRecord, state: StateSide) -> Check:
    """Row counts against the commit record, unique live keys, sane per-row columns."""
    counts = record.counts
    found = {"live rows": state.side.rows, "tombstones": state.tombstones,
             "kept rows": state.kept}
    expected = {"live rows": counts.rows, "tombstones": counts.deleted,
                "kept rows": counts.kept}
    problems = [f"{found[k]:,} {k} where the commit recorded {expected[k]:,}"
                for k in found if found[k] != expected[k]]
    if record.state_manifest is not None and state.own_rows != record.state_manifest.rows:
        problems.append(f"{state.own_rows:,} rows in version {record.version}'s state folder "
                        f"where the manifest lists {record.state_manifest.rows:,}")
    if counts.inserted + counts.updated + counts.unchanged != counts.rows:
        problems.append(f"the commit's counts disagree with each other ({counts})")
    duplicates, samples = duplicate_keys(state)
    if duplicates:
        problems.append(f"{duplicates:,} key(s) with more than one live row (e.g. {samples[0]})")
    if state.bad_row_counts:
        problems.append(f"{state.bad_row_counts:,} live row(s) whose {DUP} is not 1")
    if state.null_fingerprints:
        problems.append(f"{state.null_fingerprints:,} NULL fingerprint(s)")
    data = {**found, "duplicate_keys": duplicates, "duplicate_key_samples": samples,
            "bad_row_counts": state.bad_row_counts, "null_fingerprints": state.null_fingerprints}
    if problems:
        return Check("rows", "failed", "; ".join(problems), data)
    return Check("rows", "ok", f"{found['live rows']:,} live rows and {found['tombstones']:,} "
                 "tombstones as the commit recorded; live keys unique", data)


def check_fingerprints(record: CommitRecord, state: StateSide, csv_encoding: str,
                       same_snapshot: SameSnapshot | None = None) -> Check:
    """Every live key's fingerprint against the reference computed from the head's snapshot."""
    snapshot = record.snapshot_path
    reason = _cannot_compare(record, same_snapshot)
    if reason is not None:
        return Check("fingerprints", "skipped", f"{reason}; only the structural checks ran")
    assert snapshot is not None  # _cannot_compare said so
    kind = "csv" if snapshot.lower().endswith(".csv") else "parquet"
    try:
        result = compare_with_snapshot(state, snapshot, exclude=record.exclude,
                                       bits=record.fingerprint.bits, snapshot_kind=kind,
                                       encoding=csv_encoding, normalize=record.normalize)
    except (DiffcdcError, OSError, ValueError, TypeError, pa.ArrowException) as exc:
        return Check("fingerprints", "failed", f"cannot read the snapshot {snapshot} with "
                     f"pyarrow: {_line(exc)}")
    return fingerprint_check(result)


def fingerprint_check(result: StateCheckResult) -> Check:
    """A :class:`StateCheckResult` as a check (its summary is the detail)."""
    return Check("fingerprints", "ok" if result.ok else "failed", result.summary(),
                 result.to_dict())


def _cannot_compare(record: CommitRecord, same_snapshot: SameSnapshot | None) -> str | None:
    """Why the head's snapshot cannot be compared with its state, or None when it can."""
    snapshot = record.snapshot_path
    if not snapshot:
        return "the head version records no snapshot path"
    if not os.path.exists(snapshot):
        return f"the snapshot {snapshot} is gone"
    if record.snapshot_identity is not None and same_snapshot is not None:
        try:
            same = same_snapshot(snapshot, record.snapshot_identity)
        except DiffcdcError as exc:
            return f"the snapshot {snapshot} cannot be read ({exc.message})"
        if not same:
            return (f"the snapshot {snapshot} was replaced or rewritten since version "
                    f"{record.version} was committed (its files' identity differs)")
    if snapshot.lower().endswith(".csv"):
        typed = [f["name"] for f in record.schema.get("fields", []) if f.get("type") != "string"]
        if typed:
            return (f"the CSV snapshot {snapshot} was read with inferred types "
                    f"({', '.join(typed)}); the check reads CSV values as strings")
    return None


def check_head(
    state: TableState, snapshot_path: str | None = None, *, csv_encoding: str = "utf-8"
) -> StateCheckResult:
    """The head state against its snapshot, or against ``snapshot_path`` (any snapshot)."""
    head = state.head()
    if head is None:
        raise StateError("the table has no committed version", table=state.table, path=state.dir)
    record = head.record
    snapshot = snapshot_path or record.snapshot_path
    if snapshot is None:
        raise StateError("the head version records no snapshot path", table=state.table)
    chain = [state.abspath(link.path) for link in state_chain(state.commits(), record.version)]
    return check_state(
        chain, snapshot, keys=record.keys, exclude=record.exclude,
        bits=record.fingerprint.bits, encoding=csv_encoding, normalize=record.normalize,
        snapshot_kind="csv" if snapshot.lower().endswith(".csv") else "parquet",
    )


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
