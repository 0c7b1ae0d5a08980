"""What a run of a table would do, found without Spark and without writing anything.

Pending snapshots (the source folder against the commit log), committed versions a configured
sink has not published yet, an operator's reload or unfinished drop. ``diffcdc plan`` prints
it, ``diffcdc status`` shows the waiting snapshots, ``diffcdc run`` starts Spark only when some
table has work, and the engine follows the same plan under the table's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from diffcdc.config import TableConfig, check_secrets
from diffcdc.errors import DiffcdcError, InputRefused, StateError
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.state.owner import check_owner
from diffcdc.state.records import sink_chain
from diffcdc.state.store import Commit, TableState


@dataclass(frozen=True)
class TablePlan:
    """One table's work, as the state and the source folder say it now."""

    table: str
    #: The table's configured sink ids, in config order.
    sinks: tuple[str, ...]
    head: Commit | None
    #: Snapshots the run processes, oldest first (with a reload and nothing newer: the last
    #: committed snapshot again).
    snapshots: tuple[PendingSnapshot, ...] = ()
    #: Configured sinks that have not published the head version yet.
    unpublished: tuple[str, ...] = ()
    #: Per such sink, the versions it has yet to publish, oldest first (a sink that failed
    #: catches up in order).
    backlog: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False)
    #: The pending reload request (``diffcdc reload``), carried out by the next commit.
    reload: dict[str, Any] | None = None
    #: Why the run would fail (missing source, late snapshot, unfinished drop), found early.
    error: DiffcdcError | None = field(default=None, compare=False)

    #: A drop was started and has not finished (the run refuses the table until it is).
    drop: bool = False

    @property
    def has_work(self) -> bool:
        """Whether a run needs Spark: a snapshot to diff, a version to publish, a requested
        reload or an unfinished drop (the engine settles both under the table's lock)."""
        return bool(self.snapshots or self.unpublished or self.reload is not None or self.drop)

    @property
    def resumes(self) -> bool:
        """Whether the run first finishes the head version (a reload supersedes it)."""
        return bool(self.unpublished) and self.reload is None


def plan_table(table: TableConfig, state: TableState) -> TablePlan:
    """The plan of one table; reads state and the source folder only (no lock, no Spark)."""
    head = state.head()
    sinks = tuple(cfg.sink_id for cfg in table.sinks)
    unpublished = tuple(s for s in head.unpublished if s in sinks) if head else ()
    commits = state.commits() if unpublished else []
    backlog = {s: tuple(c.version for c in sink_chain(commits, s) if s not in c.published_sinks)
               for s in unpublished}
    drop = state.requests.has_drop_request()
    plan = TablePlan(table.name, sinks, head, unpublished=unpublished, backlog=backlog, drop=drop)
    try:
        reload = state.requests.pending_reload()
        plan = replace(plan, reload=reload)
        if drop:
            raise StateError(
                "a drop of this table was started and has not finished",
                table=table.name,
                path=state.requests.drop_path,
                hint=f"finish it with 'diffcdc drop --table {table.name} --yes', then run again",
            )
        commits = state.commits()
        check_owner(state, table.name, table.schema_name, commits)
        from diffcdc.sources.registry import build_source

        source = build_source(table)
        pending = source.pending(commits)
        if reload is not None and not pending and head is not None:
            pending = _reload_from_head(source, head, table)
        if not unpublished:  # else the run publishes the head first, then refuses (plan_error)
            check_continues(table, head, pending, reload)
    except DiffcdcError as exc:
        exc.table = exc.table or table.name
        return replace(plan, error=exc)
    return replace(plan, snapshots=tuple(pending))


def check_continues(
    table: TableConfig, head: Commit | None, pending: Sequence[PendingSnapshot],
    reload: dict[str, Any] | None,
) -> None:
    """Refuse, as the run would, a snapshot that cannot continue the head: key columns or a
    fingerprint width other than the committed ones (only a reload re-creates the table)."""
    if head is None or not pending or reload is not None:
        return
    from diffcdc.engine.plan import check_identity  # pyspark types: only for a table with work

    check_identity(head.record, list(table.keys), table, pending[0].snapshot_id or "")


def plan_error(table: TableConfig, plan: TablePlan) -> DiffcdcError | None:
    """Why the run would refuse the table, also one that first publishes its head version or
    whose secret (a password variable) is missing."""
    if plan.error is not None:
        return plan.error
    try:
        if plan.has_work:
            check_secrets([table])  # the run refuses it before Spark starts
        check_continues(table, plan.head, plan.snapshots, plan.reload)
    except DiffcdcError as exc:
        exc.table = exc.table or table.name
        return exc
    return None


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
