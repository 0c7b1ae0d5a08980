"""The plan of one table's run: every decision made once, before anything is done.

:func:`plan_table` reads the state and the source (never Spark, never a write) and returns a
frozen :class:`TablePlan`: whether the table may be touched at all (an unfinished drop, a state
folder of another table, a damaged request, a missing secret), which versions each sink has yet
to publish, which reload the next commit carries out and which sinks it starts afresh, and the
snapshots to process (pending ones, the last one again for a reload, or a kept version's for a
rollback). ``diffcdc plan`` prints it; ``diffcdc run`` (:mod:`diffcdc.engine.run`) computes the
very same plan under the table's lease and executes it step by step; a nightly run with no work
finds that out here and starts no Spark (:mod:`diffcdc.engine.idle`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from diffcdc.config import TableConfig, check_secrets
from diffcdc.engine.rollback import rollback_snapshot
from diffcdc.errors import DiffcdcError, InputRefused, StateError, UsageError, error_context
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.state.owner import check_owner
from diffcdc.state.records import sink_backlog
from diffcdc.state.requests import ReloadRequest, reload_wanted
from diffcdc.state.store import Commit, TableState


@dataclass(frozen=True)
class RunRequest:
    """What the operator asked of this run of a table (``diffcdc reload`` / ``rollback``)."""

    #: Re-create the table (recorded in state first, so a run that dies carries it over).
    reload: bool = False
    #: With ``reload``: start only these sinks afresh (``diffcdc reload --sink``).
    reload_sinks: tuple[str, ...] = ()
    #: Publish the way back to this kept version's snapshot as a new version.
    rollback_to: int | None = None

    @property
    def reload_reason(self) -> str:
        sinks = f" --sink {','.join(self.reload_sinks)}" if self.reload_sinks else ""
        return f"requested with diffcdc reload{sinks}"


@dataclass(frozen=True)
class TablePlan:
    """One table's work, as the state and the source say it now (see the module docstring)."""

    table: str
    #: The table's configured sink ids, in config order.
    sinks: tuple[str, ...]
    head: Commit | None
    #: Snapshots the run processes, oldest first (with a reload and nothing newer: the last
    #: committed snapshot again; with a rollback: the kept version's snapshot).
    snapshots: tuple[PendingSnapshot, ...] = ()
    #: Per sink with something unpublished, the versions it has yet to publish, oldest first
    #: (a sink that failed catches up in order).
    backlog: Mapping[str, tuple[int, ...]] = field(default_factory=dict, compare=False)
    #: The reload the next commit carries out (pending in state, or asked for by this run).
    reload: ReloadRequest | None = None
    #: The run records :attr:`reload` in state before anything else (``diffcdc reload``).
    record_reload: bool = False
    #: The kept version a rollback goes back to.
    rollback_to: int | None = None
    #: A drop was started and has not finished (the run refuses the table until it is).
    drop: bool = False
    #: Why the run must not touch the table at all (an unfinished drop, another table's state
    #: folder, a damaged request, a missing secret): raised before anything is done.
    refusal: DiffcdcError | None = field(default=None, compare=False)
    #: The refusal is about the state root itself (it cannot be read, the table's folder holds
    #: another table, a sink's target is not the one the state published to, or the table has
    #: no state there but its output is published): a command refuses as a whole then.
    state_root_refused: bool = False
    #: The head's keys and fingerprint were checked against the run's (:func:`check_continues`):
    #: the run's versions continue it, and no step checks that again.
    identity_checked: bool = False
    #: Why the run must refuse its snapshots (missing source, late snapshot, changed keys, a
    #: rollback that cannot be done): raised once the sinks' backlog is published.
    error: DiffcdcError | None = field(default=None, compare=False)

    @property
    def unpublished(self) -> tuple[str, ...]:
        """Configured sinks that have something left to publish."""
        return tuple(self.backlog)

    @property
    def reloading(self) -> frozenset[str]:
        """The sinks the reload starts afresh from a full image."""
        return self.reload.starts_afresh(self.sinks) if self.reload is not None else frozenset()

    @property
    def publishes_first(self) -> tuple[str, ...]:
        """Sinks that publish their backlog before any snapshot (a reload supersedes the
        backlog of the sinks it starts afresh: publishing it would be wasted, or impossible
        when their target is lost)."""
        return tuple(s for s in self.backlog if s not in self.reloading)

    @property
    def superseded(self) -> tuple[str, ...]:
        return tuple(s for s in self.backlog if s in self.reloading)

    @property
    def problem(self) -> DiffcdcError | None:
        """The error the run ends with, if any."""
        return self.refusal or self.error

    @property
    def has_work(self) -> bool:
        """Whether a run needs Spark: a snapshot to diff, a version to publish, a requested
        reload or an unfinished drop (the engine settles both under the table's lease)."""
        return bool(self.snapshots or self.backlog or self.reload is not None or self.drop)

    @property
    def resumes(self) -> bool:
        """Whether the run first finishes versions left unpublished."""
        return bool(self.publishes_first)


def plan_table(
    table: TableConfig,
    state: TableState,
    source: Source | None = None,
    request: RunRequest = RunRequest(),  # noqa: B008 - frozen
    *,
    state_given: bool | None = None,
) -> TablePlan:
    """The plan of one table; reads state and the source only (no Spark, nothing written).

    ``source`` is the table's source (built from its config when None); ``request`` what the
    operator asked of this run. ``state_given`` is set by the command line, which checks that
    its state root and targets are the table's (:func:`check_state_root`): True when the state
    root was named (``--state`` or a config file), False for the default ``./state`` (only the
    hint of a wrong root differs); None (a run in Python) checks the owner only. Every error
    found names the table (:func:`~diffcdc.errors.error_context`).
    """
    with error_context(table=table.name, snapshot=None):
        return _plan_table(table, state, source, request, state_given)


def _plan_table(table: TableConfig, state: TableState, source: Source | None,
                request: RunRequest, state_given: bool | None) -> TablePlan:
    sinks = tuple(cfg.sink_id for cfg in table.sinks)
    plan = TablePlan(table.name, sinks, None, rollback_to=request.rollback_to)
    try:
        commits = state.commits()
        head = commits[-1] if commits else None
        plan = replace(plan, head=head, drop=state.requests.has_drop_request())
        check_owner(state, table.name, table.schema_name, commits)
        if state_given is not None:
            check_state_root(table, state, commits, request, state_given)
    except DiffcdcError as exc:
        return replace(plan, refusal=exc, state_root_refused=True)
    try:
        if plan.drop:
            raise StateError(
                "a drop of this table was started and has not finished",
                table=table.name,
                path=state.requests.drop_path,
                hint=f"finish it with 'diffcdc drop --table {table.name} --yes', then run again",
            )
        pending_reload = state.requests.pending_reload()
        reload = pending_reload
        if request.reload:
            reload = reload_wanted(pending_reload, request.reload_reason, request.reload_sinks)
        backlog = {s: tuple(c.version for c in versions) for s in sinks
                   if (versions := sink_backlog(commits, s))}
        plan = replace(plan, backlog=backlog, reload=reload,
                       record_reload=reload is not pending_reload)
    except DiffcdcError as exc:
        return replace(plan, refusal=exc)
    try:
        source = source or _build_source(table)
        if request.rollback_to is not None:
            snapshots = [rollback_snapshot(table, source, commits, request.rollback_to,
                                           plan.reload)]
        else:
            snapshots = source.pending([c.snapshot_id for c in commits])
            if plan.reload is not None and not snapshots and head is not None:
                snapshots = _reload_from_head(source, head, table)
            checked = check_continues(table, head, snapshots, plan.reload)
            plan = replace(plan, identity_checked=checked)
    except DiffcdcError as exc:
        plan = replace(plan, error=exc)
    else:
        plan = replace(plan, snapshots=tuple(snapshots))
    try:
        if plan.has_work:
            check_secrets([table])  # a missing password variable: refused before Spark starts
    except DiffcdcError as exc:
        plan = replace(plan, refusal=exc)
    return plan


def check_state_root(
    table: TableConfig, state: TableState, commits: list[Commit], request: RunRequest,
    state_given: bool,
) -> None:
    """Refuse a state root that is most likely the wrong folder for this table.

    A table with state whose sink targets are not the ones that state published to (each sink
    type's plug-in checks its own, ``SinkPlugin.check_target``) is a wrong ``--landing`` or
    the state of another landing zone. A table without any state under the root whose sinks
    already hold what diffcdc publishes was published from another state root: run from the
    wrong working directory, or without the ``--state`` it was published with; processing it
    would be refused later by the sinks' checks with a hint to re-create the table — the wrong
    cure. A table re-created on purpose (``diffcdc reload``, or a pending reload or drop) is
    not checked for either.
    """
    from diffcdc.sinks.registry import check_sink_target, sink_published_output

    if commits:
        if not request.reload:
            record = commits[-1].record
            for sink in table.sinks:
                entry = record.sinks.get(sink.sink_id)
                if entry is not None:  # a wrong --landing / state root, before anything runs
                    check_sink_target(sink, entry.manifest, table.sink_table(), state_given)
        return
    if (request.reload or state.requests.has_reload_request()
            or state.requests.has_drop_request()):
        return
    published = next((found for sink in table.sinks
                      if (found := sink_published_output(sink, table.sink_table()))), None)
    if published is None:
        return
    root = state.location
    where = (f"the state root {root}" if state_given else
             f"the default state root ./state (here {root})")
    fix = ("check --state (or the config file's state)" if state_given else
           "run from the folder that holds the table's state, or give --state ROOT")
    raise UsageError(
        f"no state for this table under {where}, but its landing folder already holds "
        "diffcdc's output: it was published with another state root",
        table=table.name,
        path=published,
        hint=f"{fix}; only if that state is lost for good, re-create the table on purpose "
        "with 'diffcdc reload'",
    )


def refuse_state_roots(plans: Sequence[TablePlan]) -> None:
    """Raise the first plan's refusal of its state root: a command over several tables
    refuses as a whole then (the working directory, ``--state`` or ``--landing`` is wrong, or
    the state root is out of reach), before any table runs."""
    for plan in plans:
        if plan.state_root_refused and plan.refusal is not None:
            raise plan.refusal


def _build_source(table: TableConfig) -> Source:
    from diffcdc.sources.registry import build_source

    return build_source(table)


def check_continues(
    table: TableConfig, head: Commit | None, pending: Sequence[PendingSnapshot],
    reload: ReloadRequest | None,
) -> bool:
    """Refuse, as the run would, a snapshot that cannot continue the head: key columns or a
    fingerprint width other than the committed ones (only a reload of the whole table
    re-creates it; one of named sinks continues it). True when it was checked."""
    if head is None or not pending or (reload is not None and not reload.sinks):
        return False
    from diffcdc.engine.recreate import check_identity  # pyspark types: a table with work

    check_identity(head.record, list(table.keys), table, pending[0].snapshot_id or "")
    return True


def _reload_from_head(source: Source, head: Commit, table: TableConfig) -> list[PendingSnapshot]:
    """A reload with nothing newer waiting re-creates the table from the last snapshot."""
    again = source.again(head.snapshot_id)
    if again is None:
        raise InputRefused(
            f"nothing to reload from: the last snapshot {head.snapshot_id} is no longer in "
            "the source",
            table=table.name,
            path=source.describe(),
            hint="put a current snapshot into the source and run again (the reload stays "
            "requested)",
        )
    return [again]
