"""How a run's progress is shown: a live display on a terminal, timestamped lines otherwise.

* terminal (stderr is a tty): a live table with ``rich`` — each table's snapshot, step, rows
  and elapsed time, and the running Spark stage's tasks (from ``sc.statusTracker()``; on Spark
  Connect from the server's progress reports, ``registerProgressHandler``);
* not a terminal (a scheduler's log): one line per step, ISO-8601 time stamp with the zone,
  plus a line about a long Spark stage every :data:`STAGE_LINE_SECONDS`;
* ``--quiet``: nothing (the log file still gets every line).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from diffcdc.engine.progress import RunObserver
from diffcdc.spark.per_session import PerSession
from diffcdc.spark.session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from diffcdc.engine.plan import TablePlan
    from diffcdc.engine.report import SnapshotResult, TableReport

log = logging.getLogger("diffcdc")


class IsoFormatter(logging.Formatter):
    """ISO-8601 time stamps with the zone, e.g. ``2026-11-23T08:59:36+01:00``."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return dt.datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="seconds")

#: Plain output: a Spark stage running this long gets a line, and another this often.
STAGE_LINE_SECONDS = 30.0


@dataclass(frozen=True)
class SparkStage:
    """A running Spark stage, from the status tracker."""

    stage_id: int
    name: str
    tasks: int
    done: int
    running: int
    seconds: float

    def line(self) -> str:
        return (f"spark stage {self.stage_id} ({self.name.split(' at ')[0]}): "
                f"{self.done}/{self.tasks} tasks, {self.running} running, {self.seconds:.0f} s")


def active_stages(spark: SparkSession, first_seen: dict[int, float] | None = None) -> list[SparkStage]:
    """The Spark stages running now (empty when the tracker cannot be read).

    PySpark's stage info has no start time: a stage's age counts from when ``first_seen``
    (kept by the caller across polls) first saw it.
    """
    seen = {} if first_seen is None else first_seen
    try:
        now = time.monotonic()
        out = []
        if is_connect(spark):
            for stage_id, name, tasks, done, running in _connect_feed(spark).running():
                age = now - seen.setdefault(stage_id, now)
                out.append(SparkStage(stage_id, name, tasks, done, running, age))
        else:
            tracker = spark.sparkContext.statusTracker()
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    age = now - seen.setdefault(stage_id, now)
                    out.append(SparkStage(stage_id, info.name, info.numTasks,
                                          info.numCompletedTasks, info.numActiveTasks, age))
        for gone in set(seen) - {s.stage_id for s in out}:
            del seen[gone]
        return sorted(out, key=lambda s: s.stage_id)
    except Exception:  # noqa: BLE001 - progress must never fail a run
        return []


class _ConnectFeed:
    """A Spark Connect session's running stages, as the server reports them with each
    operation's results (a session has no status tracker to ask)."""

    def __init__(self, spark: SparkSession) -> None:
        self._lock = threading.Lock()
        self._operations: dict[str, tuple[list[Any], int]] = {}
        spark.registerProgressHandler(self._report)  # type: ignore[attr-defined]

    def _report(self, stages: list[Any], inflight_tasks: int, operation_id: str, done: bool,
                **_: Any) -> None:
        with self._lock:
            if done:
                self._operations.pop(operation_id, None)
            else:
                self._operations[operation_id] = (list(stages), inflight_tasks)

    def running(self) -> list[tuple[int, str, int, int, int]]:
        """(stage id, name, tasks, tasks done, tasks running) of each unfinished stage."""
        with self._lock:
            operations = list(self._operations.items())
        out = []
        for operation, (stages, inflight) in operations:
            for stage in stages:
                if not stage.done:
                    running = min(inflight, stage.num_tasks - stage.num_completed_tasks)
                    out.append((stage.stage_id, f"operation {operation[:8]}", stage.num_tasks,
                                stage.num_completed_tasks, running))
        return out


#: Per Spark Connect session: its feed (a handler stays registered with its session).
_FEEDS: PerSession[_ConnectFeed] = PerSession()


def _connect_feed(spark: SparkSession) -> _ConnectFeed:
    return _FEEDS.get_or_make(spark, lambda: _ConnectFeed(spark))


class _StageWatcher:
    """Polls the Spark status tracker on a daemon thread and hands the stages to ``show``."""

    def __init__(self, spark: SparkSession, every: float, show: Any) -> None:
        self._spark, self._every, self._show = spark, every, show
        if is_connect(spark):
            _connect_feed(spark)  # registered before the first job, which it then reports
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="diffcdc-progress", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        first_seen: dict[int, float] = {}
        while not self._stop.wait(self._every):
            self._show(active_stages(self._spark, first_seen))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class PlainProgress(RunObserver):
    """Timestamped lines (the ``diffcdc`` logger's handler stamps them) and long stages."""

    def __init__(self) -> None:
        self._watcher: _StageWatcher | None = None
        self._said: dict[int, float] = {}  # stage id → its age when last given a line

    def spark_started(self, spark: SparkSession) -> None:
        self._watcher = _StageWatcher(spark, 5.0, self._long_stages)

    def _long_stages(self, stages: list[SparkStage]) -> None:
        for stage in stages:
            last = self._said.get(stage.stage_id, 0.0)
            if stage.seconds - last >= STAGE_LINE_SECONDS:
                self._said[stage.stage_id] = stage.seconds
                log.info("%s", stage.line())

    def table_started(self, table: str, plan: TablePlan | None) -> None:
        if plan is not None and plan.has_work:
            log.info("%s: %s", table, plan_line(plan))

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()


def plan_line(plan: TablePlan) -> str:
    """What a table's run is about to do, in a few words."""
    parts = []
    if plan.resumes:
        parts.append(f"version {plan.head.version if plan.head else '?'} to publish "
                     f"({', '.join(plan.publishes_first)})")
    if plan.snapshots:
        parts.append(f"{len(plan.snapshots)} snapshot(s) waiting: "
                     + ", ".join(e.snapshot_id or e.path for e in plan.snapshots[:3])
                     + (", ..." if len(plan.snapshots) > 3 else ""))
    if plan.reload is not None:
        parts.append("re-creation requested")
    return "; ".join(parts) or "nothing to do"


@dataclass
class _Row:
    table: str
    started: float = field(default_factory=time.monotonic)
    snapshot: str = ""
    step: str = "planning"
    rows: str = ""
    done: float | None = None


class LiveProgress(RunObserver):
    """A live ``rich`` display on the terminal (stderr). Log lines print above it, except the
    step lines (the display shows each table's step in place); the log file gets them all."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = console or Console(stderr=True)
        self._rows: dict[str, _Row] = {}
        self._stages: list[SparkStage] = []
        self._lock = threading.Lock()
        self._watcher: _StageWatcher | None = None
        self._handlers = _TerminalHandlers(_ConsoleHandler(self.console))
        self._live = Live(console=self.console, get_renderable=self._render,
                          refresh_per_second=4, transient=False, redirect_stderr=False)
        self._live.start()

    # -- the engine's events ------------------------------------------------------------------

    def spark_started(self, spark: SparkSession) -> None:
        self._watcher = _StageWatcher(spark, 0.5, self._set_stages)

    def table_started(self, table: str, plan: TablePlan | None) -> None:
        with self._lock:  # told again once the table's plan is made under its lease
            row = self._rows.setdefault(table, _Row(table, step="starting"))
            if plan is not None:
                row.step = plan_line(plan)

    def stage(self, table: str, snapshot: str | None, stage: str) -> None:
        super().stage(table, snapshot, stage)
        with self._lock:
            row = self._rows.setdefault(table, _Row(table))
            row.snapshot, row.step = snapshot or row.snapshot, stage

    def snapshot_done(self, table: str, result: SnapshotResult) -> None:
        super().snapshot_done(table, result)
        with self._lock:
            row = self._rows.setdefault(table, _Row(table))
            row.snapshot, row.step = result.snapshot_id, "committed and published"
            row.rows = (f"{result.rows} (+{result.inserted} ~{result.updated} "
                        f"-{result.deleted})")

    def table_done(self, report: TableReport) -> None:
        with self._lock:
            row = self._rows.setdefault(report.table, _Row(report.table))
            row.step, row.done = report.outcome, time.monotonic()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        with self._lock:
            self._stages = []
        self._live.stop()
        self._handlers.restore()

    # -- drawing ------------------------------------------------------------------------------

    def _set_stages(self, stages: list[SparkStage]) -> None:
        with self._lock:
            self._stages = stages

    def _render(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        grid = Table(box=None, pad_edge=False, show_edge=False)
        for name in ("table", "snapshot", "step", "rows", "elapsed"):
            grid.add_column(name, no_wrap=name != "step", justify="right" if name == "elapsed" else "left")
        now = time.monotonic()
        with self._lock:
            rows = list(self._rows.values())
            stages = [s for s in self._stages if s.seconds >= 1]
        for row in rows:
            seconds = (row.done or now) - row.started
            grid.add_row(row.table, row.snapshot, row.step, row.rows, f"{seconds:.0f} s")
        parts: list[Any] = [grid]
        for stage in stages[:3]:
            bar = Table.grid(padding=(0, 1))
            bar.add_row(ProgressBar(total=max(stage.tasks, 1), completed=stage.done, width=30),
                        stage.line())
            parts.append(bar)
        return Group(*parts)


TERMINAL_HANDLER = "diffcdc-terminal"


class _ConsoleHandler(logging.Handler):
    """Prints log lines through the live display's console (above the display)."""

    def __init__(self, console: Any) -> None:
        super().__init__()
        self.console = console
        self.set_name(TERMINAL_HANDLER)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "diffcdc_step", False):
            return
        try:
            self.console.print(self.format(record), highlight=False, markup=False)
        except Exception:  # noqa: BLE001 - as logging.Handler does
            self.handleError(record)


class _TerminalHandlers:
    """Swaps the ``diffcdc`` logger's terminal handler for ``replacement`` until restored."""

    def __init__(self, replacement: logging.Handler) -> None:
        self.logger = logging.getLogger("diffcdc")
        self.old = [h for h in self.logger.handlers if h.get_name() == TERMINAL_HANDLER]
        for handler in self.old:
            replacement.setLevel(handler.level)
            replacement.setFormatter(logging.Formatter("%(message)s"))
            self.logger.removeHandler(handler)
        self.replacement = replacement
        self.logger.addHandler(replacement)

    def restore(self) -> None:
        self.logger.removeHandler(self.replacement)
        for handler in self.old:
            self.logger.addHandler(handler)


def choose_progress(quiet: bool, terminal: bool) -> RunObserver:
    """The observer for this run: nothing on the terminal when quiet, live on a terminal."""
    if quiet:
        return RunObserver()  # its lines reach the log file only (stderr shows warnings)
    if terminal:
        return LiveProgress()
    return PlainProgress()
