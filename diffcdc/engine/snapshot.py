"""One snapshot of one table: read → plan the version → diff into state → gate → stage sinks →
check targets → commit → publish.

Everything a snapshot produces — the new state version and every sink's staged output — is
written into an uncommitted version folder first. The commit record, created by compare-and-
swap, freezes the batch for every sink at once; from then on it is only ever published
(idempotently, per sink), never recomputed.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from diffcdc.core.changeset import change_frame, initial_frame
from diffcdc.core.classify import (
    UNKNOWN_SCOPE,
    ClassifyScope,
)
from diffcdc.core.fingerprint import (
    FINGERPRINT_VERSION,
)
from diffcdc.core.normalize import NO_RULES, Normalizers
from diffcdc.core.schema import check_snapshot_columns, resolve_columns
from diffcdc.engine.context import RunContext, sink_history
from diffcdc.engine.gate import run_gate
from diffcdc.engine.publish import failed_sinks_error, publish_backlog
from diffcdc.engine.recreate import (
    HashRule,
    Refingerprint,
    check_normalizers,
    decide_recreate,
    refingerprint,
)
from diffcdc.engine.report import SnapshotResult
from diffcdc.engine.scope import (
    check_scope_columns,
    plan_scope,
    refuse_empty,
    refuse_recreate,
)
from diffcdc.engine.sink_errors import sink_error, staging_error
from diffcdc.engine.state_write import WrittenState, state_keys, state_schema, write_state
from diffcdc.errors import ConfigError, InputRefused, error_context
from diffcdc.faults import crash_point
from diffcdc.sinks.base import ChangeSet, SinkHistory, SinkTable
from diffcdc.sinks.registry import sink_result
from diffcdc.sources.base import PendingSnapshot, Snapshot
from diffcdc.sources.snapshot_time import format_time, read_time
from diffcdc.spark.paths import read_written, spark_path
from diffcdc.state.chain import StateLink, compaction_due, state_chain
from diffcdc.state.commit import (
    CommitRecord,
    Counts,
    Fingerprint,
    Recreate,
    ScopeRecord,
    SinkEntry,
)
from diffcdc.state.guard import check_head_state
from diffcdc.state.integrity import describe_state
from diffcdc.state.requests import ReloadRequest
from diffcdc.state.store import Commit
from diffcdc.storage import paths

#: Inserted + updated keys up to this count are broadcast to pick full rows from the snapshot.
BROADCAST_CHANGED_KEYS = 2_000_000
_COUNTS = ("rows", "inserted", "updated", "deleted", "unchanged", "kept")


@dataclass(frozen=True)
class VersionPlan:
    """What one snapshot's version does, decided once (from the table's plan made under the
    lease and the snapshot just read) before any Spark work; the steps only carry it out."""

    version: int
    snapshot: Snapshot
    #: The one view of the table every sink and the change set share for this version: the
    #: keys and excluded columns as this snapshot spells them.
    table: SinkTable
    keys: list[str]  #: the key columns as the snapshot spells them
    exclude: list[str]  #: the excluded columns the snapshot has (as configured)
    #: What the batch is diffed against (None: nothing, every sink gets a full image).
    base: Commit | None
    chain: tuple[StateLink, ...]  #: the base's state chain
    recreate: Recreate | None  #: the re-creation this version makes (None: it continues)
    reload: ReloadRequest | None  #: the reload request this version carries out
    #: Sinks that start afresh from a full image (and drop their old output), and why.
    restart: Mapping[str, str]
    histories: Mapping[str, SinkHistory]  #: each sink's history this version continues
    as_of: dt.datetime | None  #: the snapshot's as-of time
    #: The normalizers, their columns spelled as the snapshot spells them.
    normalize: Normalizers = NO_RULES
    #: The re-fingerprint this version makes (None: the head's rule is the table's).
    refingerprint: Refingerprint | None = None
    #: What the snapshot covers (None: the whole table; :mod:`diffcdc.core.scope`).
    scope: ClassifyScope | None = None

    @property
    def checked(self) -> tuple[str, ...]:
        """Sinks whose target is checked right before the commit: every sink that continues
        (one that starts afresh replaces whatever is there)."""
        return tuple(s for s in self.histories if s not in self.restart)


def process_snapshot(
    ctx: RunContext,
    pending: PendingSnapshot,
    commits: list[Commit],
    reload: ReloadRequest | None = None,
) -> SnapshotResult | None:
    """One snapshot as its own version, the steps of its :class:`VersionPlan`: read, plan,
    diff into state, gate, stage every sink, check the targets, commit, publish.

    ``commits`` is the table's log as it is now (listed once for this snapshot); ``reload``
    the table plan's reload when this is its first snapshot. None when the source's snapshot
    turns out to be the last committed one again (a snapshot id query returning the same
    batch).
    """
    started = time.monotonic()
    state = ctx.state
    head = commits[-1] if commits else None
    ctx.stage(pending.snapshot_id, "read")
    snapshot = _read(ctx, pending, head, reload)
    if snapshot is None:
        return None
    step = plan_version(ctx, snapshot, commits, reload)
    # Before the diff (protects the run's time): no work for a version no sink can take; a
    # sink whose target is gone fails alone here (quick: no Delta file listing).
    _check_sinks(ctx, step, quick=True)
    crash_point("after_read")
    sid, version = snapshot.snapshot_id, step.version
    vdir = state.new_version_dir(version, ctx.run_id)
    committed = False
    try:
        ctx.stage(sid, f"fingerprint and diff (version {version})")
        written = _stage_state(ctx, snapshot.df, step, vdir,
                               snapshot_bytes=_snapshot_bytes(snapshot))
        metrics = written.counts
        crash_point("after_state_staged")
        _say_scope(ctx, step, metrics)
        gate_started = time.monotonic()
        ctx.stage(sid, f"quality gate ({metrics['rows']} rows)")
        gates = run_gate(snapshot.df, step.keys, _previous_rows(step, head, metrics),
                         metrics, ctx.gate, ctx.table.name, sid)
        gate_seconds = round(time.monotonic() - gate_started, 3)
        ctx.stage(sid, f"stage +{metrics['inserted']} ~{metrics['updated']} "
                       f"-{metrics['deleted']} for {', '.join(ctx.sinks)}")
        sinks = _stage_sinks(ctx, snapshot.df, written, step, vdir)
        crash_point("after_changes_staged")
        _refuse_changed(ctx, snapshot)
        # Right before the commit (protects the commit): a target changed while the version
        # was staged is refused before anything of it is committed or published.
        _check_sinks(ctx, step, quick=False)
        record = _record(ctx, step, written, sinks, vdir)
        ctx.stage(sid, f"commit version {version}")
        state.claim(record)
        committed = True
        if step.reload is not None:
            state.requests.clear_reload_request()
    finally:
        if not committed:
            paths.remove_tree(vdir)
    crash_point("after_claim")
    ctx.stage(sid, "publish")
    # The sinks checked above check their target again when publishing (other writers may
    # have come since), but leave out what only that check needed (a Delta table's listing).
    publish_backlog(ctx, commits=[*commits, Commit(record, frozenset())],
                    checked={s: version for s in step.checked})
    crash_point("after_published")
    return _result(ctx, record, gates, gate_seconds, started,
                   step.refingerprint.describe() if step.refingerprint else None)


def _read(
    ctx: RunContext, pending: PendingSnapshot, head: Commit | None, reload: ReloadRequest | None
) -> Snapshot | None:
    """The snapshot's rows (None: the source found the head's snapshot again); a plain run
    asks the source for what comes after the head's snapshot."""
    continues = head is not None and reload is None and ctx.plan.rollback_to is None
    after = head.snapshot_id if continues and head is not None else None
    return ctx.source.read(ctx.spark, pending, ctx.copies, after)


def plan_version(
    ctx: RunContext, snapshot: Snapshot, commits: list[Commit], reload: ReloadRequest | None
) -> VersionPlan:
    """Every decision of the version ``snapshot`` makes, taken once (raises a refusal).

    The table's plan made under the lease already decided which sinks a reload starts afresh
    (:attr:`~diffcdc.engine.plan.TablePlan.reloading`) and checked that the run's keys and
    fingerprint continue the head (:attr:`~diffcdc.engine.plan.TablePlan.identity_checked`;
    a version this run committed continues it too); what is left needs the snapshot: its
    spelling of the columns, its schema against the head's and the sinks', its time.
    """
    table, df, sid = ctx.table, snapshot.df, snapshot.snapshot_id
    head = commits[-1] if commits else None
    keys = resolve_columns(df.schema, table.keys, what="key", table=table.name, snapshot=sid)
    names = {n.lower(): n for n in df.columns}
    exclude = [c for c in table.exclude if c.lower() in names]
    ident = SinkTable(table.name, tuple(keys), table.schema_name,
                      tuple(names[c.lower()] for c in exclude))
    ctx.use_table(ident)  # every sink writes the columns as this snapshot spells them
    check_snapshot_columns(
        df.schema, keys, table=table.name, snapshot=sid, reserved=ctx.reserved_columns()
    )
    check_scope_columns(df, table, sid, snapshot.path)
    histories = {s: sink_history(commits, s) for s in ctx.sinks}
    problems = [
        p for s, sink in ctx.sinks.items() if (p := sink.schema_problem(df.schema, histories[s]))
    ]
    sink_reload = reload is not None and bool(reload.sinks)
    identity_checked = ctx.plan.identity_checked or (
        head is not None and head.record.run_id == ctx.run_id)
    recreate = decide_recreate(
        table, df.schema, keys, head.record if head else None, sid,
        None if sink_reload else reload, problems, identity_checked=identity_checked,
    )
    restart: dict[str, str] = {}
    if recreate is not None:
        ctx.say(f"{sid}: re-creating the table ({recreate.reason})")
        restart = dict.fromkeys(ctx.sinks, recreate.reason)
    elif reload is not None:
        fresh = ctx.plan.reloading
        if fresh:
            ctx.say(f"{sid}: a full image for {', '.join(sorted(fresh))} (reload requested)")
        restart = dict.fromkeys((s for s in ctx.sinks if s in fresh), reload.reason)
    histories = {s: SinkHistory() if s in restart else h for s, h in histories.items()}
    base = None if recreate else head
    as_of = _as_of_time(ctx, snapshot, head, commits,
                        again=ctx.plan.rollback_to is not None or reload is not None)
    chain = state_chain(commits, base.version) if base is not None else ()
    if base is not None:
        check_head_state(ctx.state, commits, base.version)
    scope = plan_scope(df, table, keys, as_of, base.record if base else None, sid, snapshot.path,
                       snapshot.time if ctx.plan.rollback_to is not None else None)
    if scope is not None and head is not None and recreate is not None and recreate.request is None:
        raise refuse_recreate(table.name, sid, snapshot.path, recreate.reason)
    normalize, again = _fingerprint_rule(ctx, snapshot, base, exclude)
    return VersionPlan(
        version=head.version + 1 if head else 1, snapshot=snapshot, table=ident, keys=keys,
        exclude=exclude, base=base, chain=chain, recreate=recreate, reload=reload,
        restart=restart, histories=histories, as_of=as_of, normalize=normalize,
        refingerprint=again, scope=scope,
    )


def _fingerprint_rule(
    ctx: RunContext, snapshot: Snapshot, base: Commit | None, exclude: list[str]
) -> tuple[Normalizers, Refingerprint | None]:
    """The table's normalizers as the snapshot spells their columns (refused when one does
    not fit it), and the re-fingerprint the version makes when the head's rule differs."""
    sid = snapshot.snapshot_id
    normalize = check_normalizers(ctx.table, snapshot.df.schema, sid)
    if base is None:
        return normalize, None
    again = refingerprint(base.record, snapshot.df.schema, HashRule(tuple(exclude), normalize))
    if again is not None:
        ctx.say(f"{sid}: re-fingerprinting the table ({again.describe()}): compared under the "
                "old rule, stored under the new one; no row counts as changed because of it")
    return normalize, again


def _say_scope(ctx: RunContext, step: VersionPlan, metrics: dict[str, int]) -> None:
    """A scoped snapshot: refuse it when empty; say how many keys it kept (and how many of
    them have scope values not known yet, which keeps them until a snapshot holds them)."""
    if step.scope is None:
        return
    sid = step.snapshot.snapshot_id
    if not metrics["rows"]:
        raise refuse_empty(ctx.table.name, sid, step.snapshot.path)
    if step.base is None and step.recreate is not None:
        ctx.say(f"{sid}: re-created from a scoped snapshot: the table holds the keys of its "
                "scope only")
    unknown = metrics.get(UNKNOWN_SCOPE, 0)
    if metrics["kept"]:
        more = (f"; {unknown} of them with scope values not known yet (state from before "
                "the scope): kept until a snapshot holds them, which records their values"
                if unknown else "")
        ctx.say(f"{sid}: {metrics['kept']} keys outside the snapshot's scope kept{more}")


def _previous_rows(step: VersionPlan, head: Commit | None, metrics: dict[str, int]) -> int | None:
    """What the gate's ratios divide by: the previous snapshot's rows; for a scoped snapshot
    the previous keys inside its scope (those it holds, and those it deleted)."""
    if head is None:
        return None
    if step.scope is None:
        return head.record.counts.rows
    return metrics["updated"] + metrics["unchanged"] + metrics["deleted"]


def _refuse_changed(ctx: RunContext, snapshot: Snapshot) -> None:
    """Refuse a snapshot whose files changed while the version was made from them."""
    if snapshot.changed():
        raise InputRefused(
            "snapshot changed while it was being processed",
            table=ctx.table.name,
            snapshot=snapshot.snapshot_id,
            path=snapshot.path,
            hint="wait until the extract is complete, then run again",
        )


def _record(
    ctx: RunContext, step: VersionPlan, written: WrittenState, sinks: dict[str, SinkEntry],
    vdir: str,
) -> CommitRecord:
    """The commit record of the version: the new state, every sink's manifest, the plan's
    re-creation or reload."""
    state, snapshot, base, df = ctx.state, step.snapshot, step.base, step.snapshot.df
    metrics = written.counts
    rollback_to = ctx.plan.rollback_to
    if step.reload is not None and step.reload.sinks:  # the commit carries the request out
        sinks = {s: SinkEntry(e.type, {**e.manifest, "reload": step.reload.id})
                 if s in step.restart else e for s, e in sinks.items()}
    return CommitRecord(
        version=step.version,
        table=ctx.table.name,
        run_id=ctx.run_id,
        snapshot_id=snapshot.snapshot_id,
        snapshot_path=snapshot.path,
        snapshot_identity=snapshot.identity_record,
        state_manifest=describe_state(
            df.sparkSession, paths.join(vdir, "state"), ctx.table.name, written.files
        ),
        version_dir=paths.relative(vdir, state.dir),
        state_path=posixpath.join(paths.relative(vdir, state.dir), "state"),
        state_parent=base.version if written.delta and base is not None else None,
        keys=step.keys,
        exclude=step.exclude,
        normalize=step.normalize,
        schema=df.schema.jsonValue(),
        fingerprint=Fingerprint(FINGERPRINT_VERSION, ctx.table.fingerprint_bits),
        counts=Counts(**{k: metrics.get(k, 0) for k in _COUNTS}),
        sinks=sinks,
        recreate=step.recreate,
        snapshot_time=format_time(step.as_of) if step.as_of is not None else None,
        scope=_scope_record(step, metrics),
        extra={"rollback_to": rollback_to} if rollback_to is not None else {},
    )


def _scope_record(step: VersionPlan, metrics: dict[str, int]) -> ScopeRecord | None:
    if step.scope is None:
        return None
    slots = step.scope.slots
    return ScopeRecord(list(slots.columns), slots.where, list(slots.stored),
                       metrics.get(UNKNOWN_SCOPE, 0))


def _as_of_time(
    ctx: RunContext, snapshot: Snapshot, head: Commit | None, commits: list[Commit], *,
    again: bool,
) -> dt.datetime | None:
    """The time the version shows the table as of (:mod:`diffcdc.sources.snapshot_time`).

    A time further past the run's clock than the table's ``snapshot_time_ahead`` is refused
    (a file touched into the future would hold every later snapshot back). A snapshot older
    than the last committed one is refused when the table keeps history or names its time
    rule. A rollback or a reload (``again``: a committed snapshot read once more) shows its
    rows from the head's time on: a new version is never before the head. A head committed
    with a future time (before such times were refused) does not count as the head's time:
    the newest committed time that is not in the future does.
    """
    time = snapshot.time
    now = dt.datetime.now(dt.timezone.utc)
    latest = now + dt.timedelta(seconds=ctx.table.snapshot_time_ahead)
    if time is not None and time > latest:
        raise InputRefused(
            f"the snapshot's time {format_time(time)} is more than "
            f"{ctx.table.snapshot_time_ahead} s past the run's clock "
            f"({format_time(now)})",
            table=ctx.table.name,
            snapshot=snapshot.snapshot_id,
            path=snapshot.path,
            hint="correct the snapshot's time (its files' modification time, its id, or "
            "run_dataframe's snapshot_time) and run again; a clock ahead of this one: raise the "
            "table's snapshot_time_ahead",
        )
    last = read_time(head.record.snapshot_time) if head and head.record.snapshot_time else None
    if last is not None and last > latest:
        last = _newest_past_time(commits, latest)
    if time is None or last is None or time >= last:
        return time
    if again:
        return last
    if ctx.table.snapshot_time is None and not any(
            s.needs_snapshot_time for s in ctx.sinks.values()):
        return time
    assert head is not None
    raise InputRefused(
        f"the snapshot's time {format_time(time)} is before {format_time(last)}, the time of "
        f"the last committed snapshot {head.snapshot_id}",
        table=ctx.table.name,
        snapshot=snapshot.snapshot_id,
        path=snapshot.path,
        hint="history cannot go back in time: move the older snapshot out of the source, or "
        "fix the snapshot_time rule",
    )


def _newest_past_time(commits: list[Commit], latest: dt.datetime) -> dt.datetime | None:
    """The newest committed as-of time that is not past ``latest`` (None: there is none)."""
    times = [read_time(c.record.snapshot_time) for c in commits if c.record.snapshot_time]
    return max((t for t in times if t <= latest), default=None)


def _check_sinks(ctx: RunContext, step: VersionPlan, *, quick: bool) -> None:
    """Each sink that continues checks its target is where it left it (``quick``: before the
    diff, :meth:`~diffcdc.sinks.base.Sink.quick_check`; else in full, right before the
    commit). A sink whose target changed (or is down, or its disk fails) fails on its own:
    the version is still committed and staged for it, and it publishes nothing in this run
    while the other sinks go on."""
    for sink_id in step.checked:
        sink = ctx.sinks[sink_id]
        if sink_id in ctx.failed:
            continue
        try:
            with error_context(snapshot=None):  # the sink's target, not the snapshot's
                if quick:
                    sink.quick_check(step.histories[sink_id])
                else:
                    sink.check(step.histories[sink_id])
        except Exception as exc:  # noqa: BLE001 - its disk, server or library: its own
            ctx.fail_sink(sink_error(sink, exc, "checking its target"), "before the commit")
    _some_sink_left(ctx)


def _some_sink_left(ctx: RunContext) -> None:
    if ctx.sinks and len(ctx.failed) == len(ctx.sinks):
        raise failed_sinks_error(ctx)  # no sink could take the version: nothing is committed


def _stage_state(
    ctx: RunContext,
    df: DataFrame,
    step: VersionPlan,
    vdir: str,
    *,
    snapshot_bytes: int | None = None,
) -> WrittenState:
    """Write the new state version (one pass over the snapshot): a delta on the head's state,
    or a base when there is none, compaction is due (see :mod:`diffcdc.state.chain`), the
    version re-fingerprints (the older links hold fingerprints of the old rule: a delta would
    leave its unchanged keys there) or the columns the scope keeps differ from the head's (a
    chain's links hold the same ones). ``snapshot_bytes``: the size of the snapshot's files
    (None: not known, not files)."""
    head, chain, keys, exclude = step.base, step.chain, step.keys, step.exclude
    again, scope = step.refingerprint, step.scope
    previous_keys = None
    if head is not None and again is None and _same_slots(head.record, scope):
        keys_before = state_keys(head.record.counts)
        policy = ctx.table.state_compaction
        if not compaction_due(chain, keys_before, max_deltas=policy.max_deltas,
                              max_delta_ratio=policy.max_delta_ratio):
            previous_keys = keys_before
    return write_state(
        ctx.spark, df, [ctx.state.abspath(link.path) for link in chain], keys, exclude,
        ctx.table.fingerprint_bits, paths.join(vdir, "state"), ctx.table.name,
        previous_keys=previous_keys, schema=state_schema(head.record) if head else None,
        input_bytes=_input_bytes(snapshot_bytes, chain), normalize=step.normalize,
        compared=again.compared if again is not None else None, scope=scope,
    )


def _same_slots(record: CommitRecord, scope: ClassifyScope | None) -> bool:
    """Whether a version with ``scope`` keeps the scope columns ``record``'s state keeps."""
    before = record.scope.stored if record.scope is not None else None
    now = list(scope.slots.stored) if scope is not None else None
    return before == now


def _snapshot_bytes(snapshot: Snapshot) -> int | None:
    """The size of a file snapshot's files (None: not a file snapshot)."""
    return sum(f.bytes for f in snapshot.identity) if snapshot.identity else None


def _input_bytes(snapshot_bytes: int | None, chain: tuple[StateLink, ...]) -> int | None:
    """The bytes a classification reads: the snapshot's files and its state chain's (None:
    either is not known, e.g. a JDBC snapshot or a version committed before manifests)."""
    if snapshot_bytes is None or any(link.manifest is None for link in chain):
        return None
    return snapshot_bytes + sum(
        f.bytes for link in chain if link.manifest is not None for f in link.manifest.files)


def _stage_sinks(
    ctx: RunContext,
    df: DataFrame,
    written: WrittenState,
    step: VersionPlan,
    vdir: str,
) -> dict[str, SinkEntry]:
    """Every sink's change set, accepted by all sinks first, then staged by each.

    Sinks that continue get the diff; a sink without history (first load, re-creation, or a
    sink added later) gets a full image. With several sinks taking the diff it is written once
    to the version folder and each reads that copy: the snapshot is joined only once. A sink
    whose target cannot be reached while it accepts fails alone (as in :func:`_check_sinks`);
    a sink that cannot stage stops the version: nothing is committed (see
    :func:`~diffcdc.engine.sink_errors.staging_error`).
    """
    columns, metrics, ident = df.columns, written.counts, step.table
    version, sid, histories = step.version, step.snapshot.snapshot_id, step.histories
    continuing = [s for s in ctx.sinks if step.base is not None and histories[s].manifests]
    diff = None
    if continuing:
        state_df = read_written(ctx.spark, paths.join(vdir, "state"), written.schema)
        changed = metrics["inserted"] + metrics["updated"]
        diff = change_frame(
            df, state_df, ident.keys, columns, broadcast_keys=changed <= BROADCAST_CHANGED_KEYS,
            one_task=written.one_task,
        )
        if len(continuing) > 1 and changed + metrics["deleted"]:
            path = paths.join(vdir, "changes")
            diff.write.mode("error").parquet(spark_path(ctx.spark, path))
            diff = read_written(ctx.spark, path, diff.schema)
    _refuse_partial_image(ctx, step, continuing, metrics)
    change_sets = {}
    for sink_id, sink in ctx.sinks.items():
        if sink_id in continuing:
            assert diff is not None
            changes = ChangeSet(
                ident, version, sid, df.schema, diff, False,
                metrics["inserted"], metrics["updated"], metrics["deleted"],
                snapshot_time=step.as_of, one_task=written.one_task,
            )
        else:
            changes = ChangeSet(
                ident, version, sid, df.schema, initial_frame(df, columns), True,
                metrics["rows"], 0, 0, step.restart.get(sink_id), snapshot_time=step.as_of,
            )
        change_sets[sink_id] = changes
        try:
            sink.accept(changes)
        except (InputRefused, ConfigError):
            raise  # this change set or config cannot work: nothing is committed
        except Exception as exc:  # noqa: BLE001 - its target unreachable: the sink's own
            if sink_id not in ctx.failed:
                ctx.fail_sink(sink_error(sink, exc, "checking its target"), "before the commit")
    _some_sink_left(ctx)
    out = {}
    for sink_id, sink in ctx.sinks.items():
        changes = change_sets[sink_id]
        folder = paths.join(vdir, "sinks", sink_id)
        try:
            manifest = sink.stage(changes, folder, histories[sink_id])
        except Exception as exc:  # the version waits: see staging_error
            error = staging_error(sink, exc, version, folder, ctx.state.dir)
            if error is None:
                raise
            raise error from exc
        manifest = {**manifest, "initial": changes.initial, "rows": changes.rows,
                    "snapshot_id": sid}
        out[sink_id] = SinkEntry(sink.type, manifest)
    return out


def _refuse_partial_image(
    ctx: RunContext, step: VersionPlan, continuing: list[str], metrics: dict[str, int]
) -> None:
    """Refuse a full image for a sink of a table that keeps keys outside the snapshot's scope:
    their rows are in no snapshot this version has, so the image would lack them."""
    fresh = [s for s in ctx.sinks if s not in continuing]
    if step.base is None or not fresh or not metrics.get("kept"):
        return
    raise InputRefused(
        f"sink(s) {', '.join(fresh)} need a full image, but {metrics['kept']} keys outside the "
        "scoped snapshot's scope are kept and no snapshot of this version holds their rows",
        table=ctx.table.name, snapshot=step.snapshot.snapshot_id, path=step.snapshot.path,
        hint="give it a full image from a whole snapshot: remove the table's scope for one run "
        "of a snapshot of every key (keys it lacks are deleted), or reload the table "
        "('diffcdc reload')")


def _result(
    ctx: RunContext, record: CommitRecord, gates: list[Any], gate_seconds: float, started: float,
    refingerprinted: str | None = None,
) -> SnapshotResult:
    counts = record.counts
    published = [sink_result(e.type, e.manifest) for e in record.sinks.values()]
    return SnapshotResult(
        snapshot_id=record.snapshot_id,
        version=record.version,
        files=[name for p in published for name in p.files],
        first_sequence=next((p.first_sequence for p in published if p.files), None),
        seconds=round(time.monotonic() - started, 3),
        gate=[g.to_dict() for g in gates],
        gate_seconds=gate_seconds,
        recreated=record.recreate.reason if record.recreate else None,
        refingerprinted=refingerprinted,
        sinks={s: {"type": e.type, "rows": e.manifest.get("rows", 0),
                   "published": s not in ctx.failed} for s, e in record.sinks.items()},
        rows=counts.rows,
        inserted=counts.inserted,
        updated=counts.updated,
        deleted=counts.deleted,
        unchanged=counts.unchanged,
        kept=counts.kept,
    )

