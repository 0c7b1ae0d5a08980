"""The context of one run of one table: Spark, config, state, its plan, the sinks, the gate;
and the options a run is started with."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from diffcdc.config import TableConfig
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.gate import Gate
from diffcdc.engine.plan import RunRequest, TablePlan
from diffcdc.engine.progress import MessageObserver, RunObserver
from diffcdc.engine.report import Progress
from diffcdc.engine.sink_errors import SinkFailure
from diffcdc.sinks.base import Sink, SinkHistory, SinkTable
from diffcdc.sinks.registry import build_sink
from diffcdc.sources.base import Source
from diffcdc.sources.copies import SnapshotCopies
from diffcdc.state.commit import CommitRecord
from diffcdc.state.lease import DEFAULT_LEASE_SECONDS
from diffcdc.state.records import sink_chain
from diffcdc.state.store import Commit, TableState


@dataclass(frozen=True)
class RunOptions:
    """How a table is run: the settings of ``[diffcdc]`` and ``[quality]`` that apply, what
    the operator asked of this run, and who is told what it does."""

    #: Committed versions kept for rollback (``keep_versions``).
    keep_versions: int = 10
    #: Seconds the table's lease lasts without renewal (``lease_seconds``).
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    #: The global gate settings (the table's own ``quality`` replaces fields of them).
    quality: QualityConfig | None = None
    #: Checks allowed to fail in this one run (``--override-check``).
    overrides: frozenset[str] = frozenset()
    #: Reload or rollback asked for with this run.
    request: RunRequest = RunRequest()  # noqa: B008 - frozen
    #: Told of the run's tables, steps and results (from several threads at once).
    observer: RunObserver | None = None
    #: The older way to follow a run: one callable told every message.
    progress: Progress | None = None

    def watcher(self) -> RunObserver:
        """The run's observer (the ``progress`` callable wrapped, else one that logs)."""
        if self.observer is not None:
            return self.observer
        return MessageObserver(self.progress) if self.progress else RunObserver()

    def gate(self, table: TableConfig) -> Gate:
        """The table's quality gate for this run (raises on an unknown override)."""
        return Gate.of((self.quality or QualityConfig()).merged(table.quality), self.overrides,
                       table.name)


@dataclass
class RunContext:
    """Everything the steps of one table's run share."""

    spark: SparkSession
    table: TableConfig
    state: TableState
    plan: TablePlan  #: what the run does, decided under the lease before it starts
    sinks: dict[str, Sink]  #: sink id → sink, in config order
    run_id: str
    say: Progress
    gate: Gate
    source: Source
    copies: SnapshotCopies  #: where read-once sources materialize their snapshots
    #: Tells which step a snapshot (or, with None, the table) is at: (snapshot id, step).
    stage: Callable[[str | None, str], None] = field(default=lambda snapshot, step: None)
    #: Sinks that failed in this run (sink id → its failure): they publish nothing more in it,
    #: while the table's other sinks go on (see :mod:`diffcdc.engine.publish`).
    failed: dict[str, SinkFailure] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        table: TableConfig,
        state: TableState,
        plan: TablePlan,
        run_id: str,
        watch: RunObserver,
        gate: Gate,
        source: Source,
    ) -> RunContext:
        # the keys as the head's snapshot spelled them (the config may spell them in another
        # case) until a snapshot's version gives every sink its own view (:meth:`use_table`)
        ident = table.sink_table(plan.head.record.keys if plan.head is not None else None)
        sinks = {cfg.sink_id: build_sink(cfg, ident, state) for cfg in table.sinks}
        return cls(
            spark, table, state, plan, sinks, run_id,
            lambda message: watch.message(table.name, message), gate, source,
            SnapshotCopies(state.dir, table.name),
            lambda snapshot, step: watch.stage(table.name, snapshot, step),
        )

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()

    def fail_sink(self, failure: SinkFailure, when: str) -> None:
        """Record that a sink failed (``when``: at which step); it is left alone for the rest
        of the run and the run's error names it (:func:`~diffcdc.engine.publish.
        failed_sinks_error`; the sink's error is kept as it was raised). A run that has lost
        the table's lease stops instead: what its sink found is most likely the other run's
        work."""
        self.state.check_lease()
        self.failed.setdefault(failure.sink_id, failure)
        self.say(f"{when}: sink {failure.sink_id} failed: {failure.message}")

    def use_table(self, ident: SinkTable) -> None:
        """Every sink's table for the version at hand: the one view of it, with the columns as
        the snapshot spells them (:func:`~diffcdc.engine.snapshot.plan_version`)."""
        for sink in self.sinks.values():
            sink.table = ident

    def reserved_columns(self) -> list[str]:
        return [c for sink in self.sinks.values() for c in sink.reserved_columns]


def sink_history(commits: list[Commit], sink_id: str, upto: int | None = None) -> SinkHistory:
    """A sink's manifests since it last started from nothing (oldest first; see
    :func:`~diffcdc.state.records.sink_chain`)."""
    return SinkHistory(tuple(
        (c.version, c.record.sinks[sink_id].manifest) for c in sink_chain(commits, sink_id, upto)
    ))


def staging_dir(state: TableState, record: CommitRecord, sink_id: str) -> str:
    """Where a version's staged output for a sink lives (format 1: the version folder)."""
    vdir = state.abspath(record.version_dir)
    return vdir if record.format == 1 else os.path.join(vdir, "sinks", sink_id)
