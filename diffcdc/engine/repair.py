"""``diffcdc repair``: rebuild a damaged head state exactly, touching no sink.

A version's state is a pure function of its snapshot and the state it was diffed against (the
previous version's, or nothing for a first load or a re-creation). When the snapshot is still
in the source folder with the identity recorded at commit time (same inode, ctime, size and
mtime: the very bytes that were read) and that base state is intact, the state is computed again
the way the run computed it, checked against the counts the commit recorded, and the version is
pointed at it (``log/<v>.state.json``; the commit record is never edited). Every sink already
holds the version's output, so nothing is published.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from diffcdc.config import TableConfig
from diffcdc.core.fingerprint import FINGERPRINT_VERSION
from diffcdc.engine.snapshot import write_state
from diffcdc.errors import StateError
from diffcdc.sources.files import discover, identify, read_snapshot
from diffcdc.state.guard import state_damage
from diffcdc.state.integrity import describe_state
from diffcdc.state.root import StateRoot
from diffcdc.state.store import Commit, TableState, new_run_id
from diffcdc.storage import paths

INTACT = "the state is intact"
_COUNTS = ("rows", "inserted", "updated", "deleted", "unchanged")


@dataclass(frozen=True)
class RepairResult:
    table: str
    version: int
    damaged: bool  #: whether the head state was found damaged
    repaired: bool
    reason: str  #: the damage found, or why nothing was done


def head_damage(table: TableConfig, state_root: StateRoot | str) -> RepairResult:
    """Whether the head state of ``table`` is damaged (full check, checksums included)."""
    state = TableState(state_root, table.state_name)
    head = _head(state, table)
    damage = state_damage(state, head.record, checksums=True)
    reason = f"{damage.reason}: {damage.path}" if damage else INTACT
    return RepairResult(table.name, head.version, damage is not None, False, reason)


def repair_table(
    spark: SparkSession, table: TableConfig, state_root: StateRoot | str
) -> RepairResult:
    """Rebuild the head state of ``table`` if it is damaged (see the module docstring)."""
    state = TableState(state_root, table.state_name)
    with state.lock():
        commits = state.commits()
        head = _head(state, table)
        record = head.record
        damage = state_damage(state, record, checksums=True)
        if damage is None:
            return RepairResult(table.name, head.version, False, False, INTACT)
        refuse = _refuser(table.name, head)
        if record.fingerprint.version != FINGERPRINT_VERSION:
            raise refuse(f"it was fingerprinted with version {record.fingerprint.version}")
        if not isinstance(table.source, str):
            raise refuse("only snapshots from a source folder can be read again here")
        entry = next((e for e in discover(table.source, table.name) if e.snapshot_id == record.snapshot_id), None)
        if entry is None:
            raise refuse(f"snapshot {record.snapshot_id} is no longer in {table.source}")
        if record.snapshot_identity is None:
            raise refuse("the version predates snapshot identities, so the snapshot cannot be "
                         "proven unchanged")
        if identify(entry.path, table.name, entry.snapshot_id) != record.snapshot_identity:
            raise refuse(f"snapshot {record.snapshot_id} is not the file the version was made "
                         "from (replaced or rewritten since)")
        base = commits[-2] if record.recreate is None and len(commits) > 1 else None
        if base is not None:
            base_damage = state_damage(state, base.record, checksums=True)
            if base_damage is not None:
                raise refuse(f"the state of version {base.version} it was diffed against is "
                             f"damaged or pruned too ({base_damage.reason})")
        vdir = state.abspath(record.version_dir)
        paths.makedirs(vdir, exist_ok=True)
        target = paths.join(vdir, f"state-repair-{new_run_id()}")
        try:
            df = read_snapshot(spark, entry, table.name, table.csv_infer_schema, table.csv_encoding)
            previous = state.abspath(base.record.state_path) if base is not None else None
            values = write_state(spark, df, previous, record.keys, record.exclude,
                                 record.fingerprint.bits, target, table.name).counts
            got = {k: int(values[k] or 0) for k in _COUNTS}
            want = {k: getattr(record.counts, k) for k in _COUNTS}
            if got != want:
                raise refuse(f"the rebuilt state counts {got}, the commit recorded {want}")
            manifest = describe_state(spark, target, table.name)
            state.record_repaired_state(
                head.version, paths.relative(target, state.dir), manifest, damage.reason
            )
        except BaseException:
            paths.remove_tree(target)
            raise
        return RepairResult(table.name, head.version, True, True, f"{damage.reason}: {damage.path}")


def _head(state: TableState, table: TableConfig) -> Commit:
    head = state.head()
    if head is None:
        raise StateError(
            "the table has no committed version",
            table=table.name,
            path=state.dir,
            hint="check --state (and the table name); there is nothing to repair",
        )
    return head


def _refuser(table: str, head: Commit):  # noqa: ANN202 - a small factory of errors
    def refuse(why: str) -> StateError:
        return StateError(
            f"cannot rebuild the state of version {head.version}: {why}",
            table=table,
            hint=f"re-create the table with 'diffcdc reload --table {table} --yes' (every sink "
            "gets a full image)",
        )

    return refuse
