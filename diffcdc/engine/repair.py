"""``diffcdc repair``: rebuild a damaged state exactly, touching no sink.

The head's state is a chain: a base and the deltas on it (:mod:`diffcdc.state.chain`). Its
first damaged link, version L, is rebuilt: a version's state is a pure function of its
snapshot and the state it was diffed against (version L-1's, or nothing for a first load or a
re-creation). When L's snapshot is still in the source folder with the identity recorded at
commit time (same inode, ctime, size and mtime: the very bytes that were read) and the state of
L-1 is intact, L's state is computed again the way the run computed it, written whole (a base:
later deltas build on it unchanged), checked against the counts the commit recorded, and
version L is pointed at it (``log/<L>.state.json``; the commit record is never edited). Then the
next damaged link, if any. Every sink already holds the versions' output, so nothing is
published.

A middle link L (below the head H) whose snapshot is gone or replaced cannot be rebuilt; the
head's state then is, whole, from H's own snapshot and H's own delta (its inserted, updated and
deleted keys; every other key of the snapshot was unchanged): the base a compaction would have
written at H, checked against H's recorded counts. H's chain then no longer reaches L. Only
when H's snapshot is gone too is a reload (every sink gets a full image) the way left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from diffcdc.config import TableConfig
from diffcdc.core.fingerprint import FINGERPRINT_VERSION
from diffcdc.engine.recreate import HashRule, refingerprint
from diffcdc.engine.scope import recorded_scope
from diffcdc.engine.state_write import state_schema, write_state
from diffcdc.errors import StateError
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.sources.registry import source_plugin
from diffcdc.state.chain import state_chain
from diffcdc.state.commit import CommitRecord
from diffcdc.state.guard import state_damage
from diffcdc.state.integrity import describe_state
from diffcdc.state.root import StateRoot
from diffcdc.state.store import Commit, TableState, new_run_id
from diffcdc.storage import paths

INTACT = "the state is intact"
_COUNTS = ("rows", "inserted", "updated", "deleted", "unchanged", "kept")


@dataclass(frozen=True)
class RepairResult:
    table: str
    version: int
    damaged: bool  #: whether the head state was found damaged
    repaired: bool
    reason: str  #: the damage found, or why nothing was done


def head_damage(table: TableConfig, state_root: StateRoot | str) -> RepairResult:
    """Whether the head state of ``table`` is damaged (every link of its chain, checksums
    included); ``version`` is the damaged link's."""
    state = TableState(state_root, table.state_name)
    head = _head(state, table)
    found = state_damage(state, state.commits(), checksums=True)
    if found is None:
        return RepairResult(table.name, head.version, False, False, INTACT)
    record, damage = found
    return RepairResult(table.name, record.version, True, False, f"{damage.reason}: {damage.path}")


def repair_table(
    spark: SparkSession, table: TableConfig, state_root: StateRoot | str
) -> RepairResult:
    """Rebuild every damaged link of the head's state (see the module docstring); the result
    names the first one rebuilt."""
    state = TableState(state_root, table.state_name)
    with state.lock():
        head = _head(state, table)
        done: list[tuple[int, str]] = []
        while (found := state_damage(state, state.commits(), checksums=True)) is not None:
            record, damage = found
            if any(version == record.version for version, _ in done):
                raise _refuser(table.name, record.version)(
                    f"its rebuilt state is damaged again ({damage.reason})")
            try:
                _rebuild(spark, table, state, record, damage.reason)
            except StateError as exc:
                latest = state.commits()[-1].record
                if latest.version == record.version:
                    raise
                # A middle link that cannot be rebuilt (its snapshot moved away): the head's
                # own snapshot and delta give the head's state whole, and no later version
                # builds on the damaged link any more.
                _rebuild_head(spark, table, state, latest, record.version, exc.message)
                done.append((record.version, f"{damage.reason}: {damage.path}; its state "
                             f"cannot be rebuilt ({exc.message}): the head version "
                             f"{latest.version}'s state was rebuilt whole from its snapshot "
                             "instead"))
                continue
            done.append((record.version, f"{damage.reason}: {damage.path}"))
        if not done:
            return RepairResult(table.name, head.version, False, False, INTACT)
        reason = "; ".join(why if i == 0 else f"then version {v}: {why}"
                           for i, (v, why) in enumerate(done))
        return RepairResult(table.name, done[0][0], True, True, reason)


def _rebuild(
    spark: SparkSession, table: TableConfig, state: TableState, record: CommitRecord, damage: str
) -> None:
    """Rebuild version ``record``'s state whole from its snapshot and point the version at it."""
    refuse = _refuser(table.name, record.version)
    source, entry = _proven_snapshot(table, record, refuse)
    commits = state.commits()
    earlier = [c for c in commits if c.version < record.version]
    base = earlier[-1] if record.recreate is None and earlier else None
    chain = state_chain(commits, base.version) if base is not None else ()
    if base is not None and (found := state_damage(state, commits, base.version,
                                                   checksums=True)) is not None:
        raise refuse(f"the state of version {base.version} it was diffed against is "
                     f"damaged or pruned too ({found[1].reason})")
    vdir = state.abspath(record.version_dir)
    paths.makedirs(vdir, exist_ok=True)
    target = paths.join(vdir, f"state-repair-{new_run_id()}")
    try:
        df = source.read_again(spark, entry)
        # the version's own rule; compared under its base's when it re-fingerprinted
        rule = HashRule(tuple(record.exclude), record.normalize)
        again = refingerprint(base.record, df.schema, rule) if base is not None else None
        values = write_state(spark, df, [state.abspath(link.path) for link in chain],
                             record.keys, record.exclude, record.fingerprint.bits, target,
                             table.name, schema=state_schema(base.record) if base else None,
                             normalize=record.normalize,
                             compared=again.compared if again is not None else None,
                             scope=recorded_scope(record, df, base.record if base else None)
                             ).counts
        got = {k: int(values[k] or 0) for k in _COUNTS}
        want = {k: getattr(record.counts, k) for k in _COUNTS}
        if got != want:
            raise refuse(f"the rebuilt state counts {got}, the commit recorded {want}")
        manifest = describe_state(spark, target, table.name)
        state.record_repaired_state(
            record.version, paths.relative(target, state.dir), manifest, damage
        )
    except BaseException:
        paths.remove_tree(target)
        raise


def _rebuild_head(
    spark: SparkSession, table: TableConfig, state: TableState, head: CommitRecord,
    damaged: int, why: str,
) -> None:
    """Rebuild the head's state whole (a base) from the head's snapshot and its own delta,
    so that its chain no longer reaches version ``damaged``.

    The head's delta holds the keys the head inserted, updated and deleted (tombstones) with
    their kinds; every other key of the head's snapshot was unchanged. That is exactly the base
    a compaction would have written at the head; its counts are checked against the commit's.
    """
    from pyspark.sql import functions as F

    from diffcdc.core.classify import CHANGE, DUP, UNCHANGED, state_metrics
    from diffcdc.core.fingerprint import fingerprint_exprs
    from diffcdc.core.normalize import register_functions
    from diffcdc.core.scope import SCOPED, SLOT_PREFIX
    from diffcdc.core.sql import quote
    from diffcdc.spark.paths import read_written, spark_path
    from diffcdc.state.integrity import find_damage

    def refuse(reason: str) -> StateError:
        return StateError(
            f"cannot rebuild the state of version {damaged} ({why}), nor the head version "
            f"{head.version}'s from its own snapshot: {reason}",
            table=table.name,
            hint=f"re-create the table with 'diffcdc reload --table {table.name} --yes' (every "
            "sink gets a full image of the newest snapshot: the cost of the only way left)",
        )

    if head.state_parent is None or head.state_manifest is None:
        raise refuse("its state is no delta of its own")
    if find_damage(state.abspath(head.state_path), head.state_manifest, checksums=True):
        raise refuse("its own state folder is damaged too")
    source, entry = _proven_snapshot(table, head, refuse)
    folder = paths.join(state.abspath(head.version_dir), f"state-repair-{new_run_id()}")
    paths.makedirs(state.abspath(head.version_dir), exist_ok=True)
    try:
        df = source.read_again(spark, entry)
        keys = list(head.keys)
        register_functions(spark, head.normalize)
        scoped = head.scope is not None  # the unchanged keys keep their scope values too
        narrow = df.select(*[quote(k) for k in keys],
                           *fingerprint_exprs(df.schema, keys, head.exclude,
                                              head.fingerprint.bits, head.normalize),
                           *([F.lit(True).alias(SCOPED)] if scoped else []),
                           *[F.col(quote(c)).alias(f"{SLOT_PREFIX}{i}")
                             for i, c in enumerate(head.scope.stored if head.scope else [])])
        delta = read_written(spark, state.abspath(head.state_path), state_schema(head))
        rest = (narrow.join(delta.select(*[quote(k) for k in keys]), on=keys, how="left_anti")
                .withColumn(CHANGE, F.lit(UNCHANGED).cast("int"))
                .withColumn(DUP, F.lit(1).cast("long")))
        whole = delta.unionByName(rest.select(*[quote(c) for c in delta.columns]))
        whole.write.mode("error").option("compression", "zstd").parquet(spark_path(spark, folder))
        (values,) = read_written(spark, folder, whole.schema).agg(
            *state_metrics(keys, scoped=scoped)).collect()
        got = {k: int(values[k] or 0) for k in _COUNTS}
        want = {k: getattr(head.counts, k) for k in _COUNTS}
        if got != want:
            raise refuse(f"the rebuilt state counts {got}, the commit recorded {want}")
        manifest = describe_state(spark, folder, table.name)
        state.record_repaired_state(
            head.version, paths.relative(folder, state.dir), manifest,
            f"version {damaged}'s state is damaged and cannot be rebuilt ({why})")
    except BaseException:
        paths.remove_tree(folder)
        raise


def _proven_snapshot(
    table: TableConfig, record: CommitRecord, refuse: Any
) -> tuple[Source, PendingSnapshot]:
    """The table's source and its entry of ``record``'s snapshot, proven to be the file it was
    made from (same identity), else ``refuse(why)`` raised."""
    if record.fingerprint.version != FINGERPRINT_VERSION:
        raise refuse(f"it was fingerprinted with version {record.fingerprint.version}")
    plugin = source_plugin(table.source)
    if not plugin.capabilities.reads_again:
        raise refuse("only snapshots from a source folder can be read again here")
    source = plugin.build(table)
    entry = source.again(record.snapshot_id)
    if entry is None:
        raise refuse(f"snapshot {record.snapshot_id} is no longer in {source.describe()}")
    if record.snapshot_identity is None:
        raise refuse("the version predates snapshot identities, so the snapshot cannot be "
                     "proven unchanged")
    if not source.proven(entry, record.snapshot_identity):
        raise refuse(f"snapshot {record.snapshot_id} is not the file the version was made "
                     "from (replaced or rewritten since)")
    return source, entry


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


def _refuser(table: str, version: int):  # noqa: ANN202 - a small factory of errors
    def refuse(why: str) -> StateError:
        return StateError(
            f"cannot rebuild the state of version {version}: {why}",
            table=table,
            hint=f"re-create the table with 'diffcdc reload --table {table} --yes' (every sink "
            "gets a full image)",
        )

    return refuse
