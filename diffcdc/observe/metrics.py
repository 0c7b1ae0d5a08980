"""The Prometheus metrics of a run (docs/metrics.md): per table, its last success and refresh,
the last run's duration and counts, the snapshots waiting, each sink's backlog and the exit
class, with the numbers ``status --json`` shows; written as a text file (atomically, for
node-exporter's textfile collector) and optionally pushed to a Pushgateway.

:func:`build_registry` makes the metrics from typed facts (no IO); :func:`write_metrics` and
:func:`push_metrics` are the edges. Neither raises: a file that cannot be written or a gateway
that does not answer is one warning line — the run's data is correct either way, and its exit
code stays the run's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diffcdc.observe.run_facts import TableFacts, TableStatusFacts, exit_class
from diffcdc.observe.settings import without_credentials

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("diffcdc")

#: The metric of a table's exit code in the run that last ran it.
EXIT_METRIC = "diffcdc_table_last_run_exit_code"


@dataclass(frozen=True)
class TableExit:
    """A table's exit code in the last run that ran it (a run of a subset keeps the others')."""

    table: str
    exit_code: int
    exit_class: str


#: The metric of a table's last success.
SUCCESS_METRIC = "diffcdc_table_last_success_timestamp_seconds"


def _samples(previous: str) -> list[Any]:
    """The samples of a metrics file's text (none: unreadable, not a file of ours)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [s for family in text_string_to_metric_families(previous) for s in family.samples]
    except (ValueError, KeyError, TypeError):  # torn by hand, or another tool's
        return []


def with_carried_success(tables: Sequence[TableStatusFacts], previous: str
                         ) -> list[TableStatusFacts]:
    """``tables`` with each one's last success no older than the one ``previous`` (the file
    this run replaces) shows. State keeps the last run and the last run that changed something:
    after a night with nothing to do and then a failed one, it knows only the older change,
    while the file written after the quiet night knows that night's success."""
    import dataclasses

    before: dict[str, float] = {}
    for s in _samples(previous):
        if s.name == SUCCESS_METRIC and "table" in s.labels and math.isfinite(s.value):
            before[s.labels["table"]] = s.value
    out = []
    for table in tables:
        known = [v for v in (table.last_success, before.get(table.table)) if v is not None]
        out.append(dataclasses.replace(table, last_success=max(known)) if known else table)
    return out


def carried_exits(previous: str, tables: Collection[str]) -> list[TableExit]:
    """The exit codes of ``tables`` in the metrics file ``previous`` (its text; unreadable:
    none): what a run of a subset (``--only``) keeps of the tables it did not run."""
    return [TableExit(s.labels["table"], int(s.value), s.labels.get("exit_class", ""))
            for s in _samples(previous)
            if s.name == EXIT_METRIC and s.labels.get("table") in tables
            and math.isfinite(s.value) and s.value == int(s.value)]


def build_registry(tables: Sequence[TableStatusFacts], runs: Sequence[TableFacts | TableExit],
                   exit_code: int, finished: float, seconds: float) -> CollectorRegistry:
    """The run's metrics: ``tables`` as ``status`` shows them after the run, ``runs`` this
    run's outcome per table (and, for a subset's run, the other tables' last outcome),
    ``exit_code`` the command's, ``finished`` its end (epoch)."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()

    def gauge(name: str, text: str, labels: Sequence[str] = ("table",)) -> Gauge:
        return Gauge(name, text, list(labels), registry=registry)

    per_table = {
        "last_success_timestamp_seconds": (
            "End of the table's last run that ended without an error (Unix time)",
            lambda t: t.last_success),
        "last_commit_timestamp_seconds": (
            "When the table's newest version was committed: its data last refreshed (Unix time)",
            lambda t: t.committed_at),
        "last_run_duration_seconds": ("Duration of the table's last run",
                                      lambda t: t.last_run_seconds),
        "last_run_inserted_rows": ("Rows the table's last run inserted", lambda t: t.inserted),
        "last_run_updated_rows": ("Rows the table's last run updated", lambda t: t.updated),
        "last_run_deleted_rows": ("Rows the table's last run deleted", lambda t: t.deleted),
        "version": ("The table's newest committed version", lambda t: t.version),
        "rows": ("Rows of the table's newest committed version", lambda t: t.rows),
        "snapshots_pending": ("Snapshots waiting in the table's source", lambda t: t.waiting),
    }
    for suffix, (text, value) in per_table.items():
        metric = gauge(f"diffcdc_table_{suffix}", text)
        for table in tables:
            if (v := value(table)) is not None:
                metric.labels(table.table).set(float(v))
    backlog = gauge("diffcdc_sink_backlog_versions",
                    "Committed versions of the table the sink has yet to publish",
                    ("table", "sink", "type"))
    for table in tables:
        for sink in table.sinks:
            backlog.labels(table.table, sink.sink, sink.type).set(sink.backlog)
    codes = gauge(EXIT_METRIC,
                  "Exit code of the table in the last run that ran it (0 ok, 1 failed, 2 usage, "
                  "3 refused)",
                  ("table", "exit_class"))
    for run in runs:
        codes.labels(run.table, run.exit_class).set(run.exit_code)
    gauge("diffcdc_run_exit_code", "Exit code of the diffcdc run", ("exit_class",)
          ).labels(exit_class(exit_code)).set(exit_code)
    gauge("diffcdc_run_timestamp_seconds", "When the diffcdc run ended (Unix time)", ()
          ).set(finished)
    gauge("diffcdc_run_duration_seconds", "Duration of the diffcdc run", ()).set(seconds)
    return registry


def write_metrics(registry: CollectorRegistry, path: str) -> bool:
    """The metrics as a Prometheus text file at ``path``, put in place by a rename (a reader
    never sees half a file); False (one warning line) when it cannot be written."""
    from prometheus_client import write_to_textfile

    try:
        write_to_textfile(path, registry)
    except OSError as exc:
        log.warning("the metrics file %s could not be written (%s); the run's result stands: "
                    "check --metrics-file / [metrics] file and the folder's permissions",
                    path, exc.strerror or exc)
        return False
    return True


def push_metrics(registry: CollectorRegistry, gateway: str, job: str, timeout: float) -> bool:
    """The metrics pushed to a Pushgateway (replacing the job's group); False (one warning
    line) when it does not take them within ``timeout`` seconds."""
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(gateway, job=job, registry=registry, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - its network, its answer: never the run's result
        log.warning("the metrics could not be pushed to the Pushgateway %s (%s); the run's "
                    "result stands: check [metrics] pushgateway", without_credentials(gateway),
                    without_credentials(exc)[:200])
        return False
    return True
