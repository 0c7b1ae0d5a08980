"""What a run tells while it works: tables, snapshots, stages, results (no output of its own).

The engine calls a :class:`RunObserver`; the command line chooses how it is shown (a live
display on a terminal, timestamped lines otherwise, nothing with ``--quiet``). The default
observer logs one line per message on the ``diffcdc`` logger, as the engine always did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from diffcdc.engine.plan import TablePlan
    from diffcdc.engine.report import SnapshotResult, TableReport

log = logging.getLogger("diffcdc")
#: Marks a step line: a live display shows steps in place, so its terminal handler drops them.
STEP = {"diffcdc_step": True}


class RunObserver:
    """Receives a run's progress; every method may be overridden, none may raise."""

    def spark_started(self, spark: SparkSession) -> None:
        """Spark is up (only when some table has work): its jobs can be followed now."""

    def table_started(self, table: str, plan: TablePlan | None) -> None:
        """A table's run begins (``plan``: what it found to do, when known)."""

    def stage(self, table: str, snapshot: str | None, stage: str) -> None:
        """A step of a snapshot (``read``, ``diff``, ``gate``, ``stage``, ``commit``,
        ``publish``) or of the table (``snapshot`` None: finishing an unpublished version)."""
        log.info("%s: %s", table, f"{snapshot}: {stage}" if snapshot else stage, extra=STEP)

    def message(self, table: str, text: str) -> None:
        """Something worth a line of its own."""
        log.info("%s: %s", table, text)

    def snapshot_done(self, table: str, result: SnapshotResult) -> None:
        """A snapshot is committed and published."""
        log.info(
            "%s: %s: +%d ~%d -%d (%d rows, %d file(s))", table, result.snapshot_id,
            result.inserted, result.updated, result.deleted, result.rows, len(result.files),
        )

    def table_done(self, report: TableReport) -> None:
        """A table's run ended (also when it failed)."""

    def close(self) -> None:
        """The run is over: release the display."""


class MessageObserver(RunObserver):
    """Hands every message, stage and result to one callable (the old ``progress`` hook)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def stage(self, table: str, snapshot: str | None, stage: str) -> None:
        self.say(f"{snapshot}: {stage}" if snapshot else stage)

    def message(self, table: str, text: str) -> None:
        self.say(text)

    def snapshot_done(self, table: str, result: SnapshotResult) -> None:
        self.say(
            f"{result.snapshot_id}: +{result.inserted} ~{result.updated} -{result.deleted} "
            f"({result.rows} rows, {len(result.files)} file(s))"
        )
