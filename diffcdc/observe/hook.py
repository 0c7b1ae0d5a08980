"""The run command's observers (``diffcdc run``, ``reload``, ``rollback``): the progress
display, and what the tools watching the run get — lineage events as the tables go, the
metrics file at the end. One object the command makes (:func:`run_observers`), hands to the
engine as its observer, and finishes with the run's reports (:meth:`RunObservers.finish`)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diffcdc.engine.progress import RunObserver
from diffcdc.observe.run_facts import TableFacts, TableStatusFacts, VersionFacts
from diffcdc.observe.settings import without_credentials

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from diffcdc.config import RunConfig, TableConfig
    from diffcdc.engine.plan import TablePlan
    from diffcdc.engine.report import SnapshotResult, TableReport
    from diffcdc.observe.lineage import LineageEmitter, LineageJob

log = logging.getLogger("diffcdc")


@dataclass
class _Open:
    """A table's lineage run that has begun and not ended."""

    run_id: str
    snapshot_id: str | None


@dataclass
class LineageObserver:
    """Turns a run's progress into lineage events: a version's START when its snapshot is
    first read, its COMPLETE when it is done, FAIL when its table fails first."""

    config: RunConfig
    emitter: LineageEmitter
    namespace: str
    _jobs: dict[str, LineageJob] = field(default_factory=dict)
    _open: dict[str, _Open] = field(default_factory=dict)
    _ended: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def job(self, table: str) -> LineageJob | None:
        from diffcdc.observe.lineage import LineageJob

        with self._lock:
            if table not in self._jobs:
                found = next((t for t in self.config.tables if t.name == table), None)
                if found is None:
                    return None
                self._jobs[table] = LineageJob.of(found, self.namespace)
            return self._jobs[table]

    def begin(self, table: str, snapshot: str | None) -> None:
        from diffcdc.observe.lineage import new_run_id, now, start_event, unchanged_event

        job = self.job(table)
        if job is None:
            return
        with self._lock:
            current = self._open.get(table)
            if current is not None and current.snapshot_id == snapshot:
                return
            opened = self._open[table] = _Open(new_run_id(), snapshot)
        if current is not None:  # the last snapshot read made no version
            self.emitter.emit(unchanged_event(job, current.run_id, now(), current.snapshot_id))
        self.emitter.emit(start_event(job, opened.run_id, now(), snapshot))

    def done(self, table: str, result: SnapshotResult) -> None:
        from diffcdc.observe.lineage import complete_event, now

        job = self.job(table)
        with self._lock:
            opened = self._open.pop(table, None)
        if job is None or opened is None:
            return
        self.emitter.emit(complete_event(job, opened.run_id, now(), VersionFacts.of(result),
                                         self._schema(table, result.version)))

    def ended(self, report: TableReport) -> None:
        """A table's run is over: a version begun and not done failed; a failed table with
        none begun gets a run of its own (START and FAIL)."""
        from diffcdc.observe.lineage import fail_event, now, unchanged_event

        with self._lock:
            if report.table in self._ended:
                return
            self._ended.add(report.table)
            opened = self._open.pop(report.table, None)
        if report.error is None:
            job = self.job(report.table)
            if opened is not None and job is not None:  # its snapshot made no version
                self.emitter.emit(unchanged_event(job, opened.run_id, now(), opened.snapshot_id))
            return
        if opened is None:
            self.begin(report.table, None)
            with self._lock:
                opened = self._open.pop(report.table, None)
        job = self.job(report.table)
        if job is not None and opened is not None:
            self.emitter.emit(fail_event(job, opened.run_id, now(), TableFacts.of(report),
                                         opened.snapshot_id))

    def abort(self) -> None:
        """The run is stopped with runs still open (Ctrl-C, an unexpected error): each is
        ABORTed, and what is queued sent (a bounded wait)."""
        from diffcdc.observe.lineage import abort_event, now

        with self._lock:
            opened, self._open = self._open, {}
        for table, run in opened.items():
            job = self.job(table)
            if job is not None:
                self.emitter.emit(abort_event(job, run.run_id, now(), run.snapshot_id))
        if opened:
            self.emitter.close()

    def _schema(self, table: str, version: int) -> dict[str, Any] | None:
        """The committed version's snapshot schema, as its commit record keeps it."""
        from diffcdc.state.store import TableState

        found = next((t for t in self.config.tables if t.name == table), None)
        if found is None:
            return None
        state = TableState(self.config.state_root(), found.state_name)
        head = state.head()
        if head is None or head.version != version:
            head = next((c for c in state.commits() if c.version == version), None)
        return None if head is None else head.record.schema


class RunObservers(RunObserver):
    """The progress display and, when configured, the lineage events; none may raise (a
    lineage problem is one warning line, never the run's)."""

    def __init__(self, config: RunConfig, progress: RunObserver, metrics_file: str | None,
                 lineage: LineageObserver | None,
                 config_tables: list[TableConfig] | None = None) -> None:
        self.config, self.progress = config, progress
        self.metrics_file = metrics_file
        self.lineage = lineage
        #: Every table of the config when the run is of a subset (``--only``): the metrics
        #: file keeps them all, or an alert on a table not run would stop watching it.
        self.config_tables = config_tables

    def _lineage(self, call: str, *values: Any) -> None:
        if self.lineage is None:
            return
        try:
            getattr(self.lineage, call)(*values)
        except Exception as exc:  # noqa: BLE001 - lineage never fails a run
            log.warning("OpenLineage events stop here (%s: %s); the run's result stands",
                        type(exc).__name__, without_credentials(exc)[:200])
            self.lineage = None

    def spark_started(self, spark: SparkSession) -> None:
        self.progress.spark_started(spark)

    def table_started(self, table: str, plan: TablePlan | None) -> None:
        self.progress.table_started(table, plan)

    def stage(self, table: str, snapshot: str | None, stage: str) -> None:
        self.progress.stage(table, snapshot, stage)
        if snapshot is not None:
            self._lineage("begin", table, snapshot)

    def message(self, table: str, text: str) -> None:
        self.progress.message(table, text)

    def snapshot_done(self, table: str, result: SnapshotResult) -> None:
        self.progress.snapshot_done(table, result)
        self._lineage("done", table, result)

    def table_done(self, report: TableReport) -> None:
        self.progress.table_done(report)
        self._lineage("ended", report)

    def close(self) -> None:
        self.progress.close()
        self._lineage("abort")  # runs still open: the run was stopped before their end

    def finish(self, reports: list[TableReport], exit_code: int, seconds: float) -> None:
        """The run (of ``seconds``, ending with ``exit_code``) is over: lineage for the tables
        refused before Spark, then every event sent (a bounded wait), then the metrics file
        and its push."""
        for report in reports:
            self._lineage("ended", report)
        self._close(reports, exit_code, seconds)

    def crashed(self, exc: BaseException, seconds: float) -> None:
        """The run was ended by ``exc`` before its tables' reports (Spark would not start, a
        lost server, Ctrl-C): the metrics file says so, each table of the run with the run's
        exit code — left as it was, it would show the last run's success."""
        from diffcdc.errors import DiffcdcError
        from diffcdc.observe.metrics import TableExit
        from diffcdc.observe.run_facts import exit_class
        from diffcdc.spark.connect import lost_server_error

        lost = lost_server_error(exc) if isinstance(exc, Exception) else None
        code = exc.exit_code if isinstance(exc, DiffcdcError) else \
            130 if isinstance(exc, KeyboardInterrupt) else \
            lost.exit_code if lost is not None else 1  # as diffcdc.cli.main maps them
        self._close([], code, seconds, [TableExit(t.name, code, exit_class(code))
                                         for t in self.config.tables])

    def _close(self, reports: list[TableReport], exit_code: int, seconds: float,
               ended: list[Any] | None = None) -> None:
        """Every event sent (a bounded wait), then the metrics file and its push, if asked
        for; a failure there is one warning line (metrics never change the run's result)."""
        if self.lineage is not None:
            self.lineage.emitter.close()
        settings = self.config.metrics
        gateway = settings.pushgateway if settings is not None else None
        if self.metrics_file is None and gateway is None:
            return
        try:
            self._metrics(reports, exit_code, seconds, gateway, ended)
        except Exception as exc:  # noqa: BLE001 - metrics never change the run's result
            log.warning("the run's metrics were not written (%s: %s); the run's result "
                        "stands", type(exc).__name__, without_credentials(exc)[:200])

    def _metrics(self, reports: list[TableReport], exit_code: int, seconds: float,
                 gateway: str | None, ended: list[Any] | None = None) -> None:
        from diffcdc.cli.status import config_status
        from diffcdc.observe.metrics import (
            build_registry,
            carried_exits,
            push_metrics,
            with_carried_success,
            write_metrics,
        )

        config = self.config if self.config_tables is None else \
            self.config.model_copy(update={"tables": self.config_tables})
        tables = [TableStatusFacts.of(t) for t in config_status(config)]
        runs: list[Any] = [TableFacts.of(r) for r in reports] + list(ended or ())
        others = {t.name for t in config.tables} - {r.table for r in runs}
        if self.metrics_file is not None:
            previous = _previous(self.metrics_file)
            tables = with_carried_success(tables, previous)
            runs += carried_exits(previous, others)
        registry = build_registry(tables, runs, exit_code, time.time(), seconds)
        if self.metrics_file is not None:
            write_metrics(registry, self.metrics_file)
        if gateway is not None and self.config.metrics is not None:
            push_metrics(registry, gateway, self.config.metrics.job, self.config.metrics.timeout)


def _previous(path: str) -> str:
    """The metrics file a run replaces (empty: none, or unreadable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeError):
        return ""


def run_observers(config: RunConfig, progress: RunObserver,
                  metrics_file: str | None = None,
                  config_tables: list[TableConfig] | None = None) -> RunObservers:
    """The observers of a run of ``config`` (``metrics_file``: ``--metrics-file``, else the
    config's ``[metrics] file``; ``config_tables``: every table of the config, when ``config``
    holds the subset ``--only`` chose)."""
    import os

    from diffcdc.extras import METRICS, require
    from diffcdc.observe.lineage import LineageEmitter

    if metrics_file is not None:  # [metrics] is checked with the config
        require(METRICS, where="--metrics-file")
    file = metrics_file or (config.metrics.file if config.metrics is not None else None)
    if file is not None:
        _metrics_file_apart(file, config, config_tables)
    settings = config.lineage
    emitter = LineageEmitter.open(settings)
    lineage = None
    if emitter is not None:
        namespace = settings.namespace if settings is not None else \
            os.environ.get("OPENLINEAGE_NAMESPACE") or "diffcdc"
        lineage = LineageObserver(config, emitter, namespace)
    return RunObservers(config, progress, file, lineage, config_tables)


def _metrics_file_apart(file: str, config: RunConfig,
                        config_tables: list[TableConfig] | None) -> None:
    """Refuse (exit 2, before anything ran) a metrics file inside the state root, a source
    folder or a sink's folder: rewritten every run, it would be read as a snapshot (the table
    refused every night after) or sit in a target as a foreign file."""
    from diffcdc.cli.report import guarded_folders, refuse_inside

    whole = config if config_tables is None else config.model_copy(update={"tables": config_tables})
    option = "--metrics-file" if file != (config.metrics.file if config.metrics else None) \
        else "[metrics] file"
    refuse_inside(file, guarded_folders(config.state_root(), whole), option, "the metrics file")
