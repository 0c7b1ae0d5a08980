"""One run of one table: discover → read → fingerprint → diff → stage → commit → publish.

Exactly-once protocol (see :mod:`diffcdc.state.store`): everything a snapshot produces (new state
version, final-named landing files with their sequence numbers) is written to an uncommitted
version folder first. The commit record, created by compare-and-swap, freezes the batch; from
then on it is only ever published (idempotently), never recomputed. A run first finishes a
committed-but-unpublished batch left by a crashed run, then processes new snapshots, each as
its own committed step.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from diffcdc import __version__
from diffcdc.config import RunConfig, TableConfig
from diffcdc.core.classify import change_rows, classify, state_metrics
from diffcdc.core.fingerprint import (
    FINGERPRINT_VERSION,
    fingerprint_columns,
    fingerprint_exprs,
    quote,
)
from diffcdc.core.quality import (
    ChangeCounts,
    GateReport,
    QualityConfig,
    SnapshotStats,
    gate_changes,
    gate_snapshot,
    validate_overrides,
)
from diffcdc.core.schema import check_snapshot_columns, resolve_columns
from diffcdc.errors import DiffcdcError, InputRefused, LateSnapshotError, StateError
from diffcdc.faults import crash_point
from diffcdc.sinks.openmirroring.contract import (
    check_continuation,
    ensure_partner_events,
    known_files,
    metadata_item,
    stage_parquet_files,
    table_folder,
)
from diffcdc.sinks.openmirroring.plan import plan_landing
from diffcdc.sinks.openmirroring.publish import publish_commit
from diffcdc.sinks.storage.base import LandingStorage, open_landing
from diffcdc.sources.files import SnapshotEntry, discover, read_snapshot
from diffcdc.state.store import Commit, TableState, new_run_id, now_iso

log = logging.getLogger("diffcdc")

#: Inserted + updated keys up to this count are broadcast to pick full rows from the snapshot.
BROADCAST_CHANGED_KEYS = 2_000_000
#: Change sets up to this many rows are sorted in one task (no range-partitioning sample pass).
SINGLE_TASK_SORT_ROWS = 1_000_000

Progress = Callable[[str], None]


@dataclass
class SnapshotResult:
    """What one snapshot produced."""

    snapshot_id: str
    version: int
    rows: int
    inserted: int
    updated: int
    deleted: int
    unchanged: int
    files: list[str]
    first_sequence: int | None
    seconds: float
    gate: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds spent in the quality gate beyond the diff pass (user expectations, samples).
    gate_seconds: float = 0.0
    #: Why the table was re-created with this snapshot (None: it continued).
    recreated: str | None = None


@dataclass
class TableReport:
    """The outcome of one run of one table (kept in state, printed, and in ``--json``)."""

    table: str
    run_id: str
    started_at: str
    outcome: str = "ok"  # ok | nothing to do | failed
    snapshots: list[SnapshotResult] = field(default_factory=list)
    resumed_versions: list[int] = field(default_factory=list)
    #: Quality gate results of the snapshot that was refused, if any.
    refused_gate: list[dict[str, Any]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    seconds: float = 0.0
    diffcdc_version: str = __version__

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def exit_code(self) -> int:
        return int(self.error["exit_code"]) if self.error else 0


def run_table(
    spark: SparkSession,
    table: TableConfig,
    state_root: str,
    *,
    keep_versions: int = 10,
    progress: Progress | None = None,
    quality: QualityConfig | None = None,
    overrides: frozenset[str] = frozenset(),
    reload: bool = False,
) -> TableReport:
    """Process every pending snapshot of one table. Raises DiffcdcError on failure.

    ``quality`` holds the global gate settings (the table's own ``quality`` replaces fields of
    it); ``overrides`` names checks allowed to pass for this one run. The report (passed or
    failed) is saved with the table's state before returning/raising. ``reload`` re-creates
    the table (``diffcdc reload``): the request is recorded in state first, so a run that
    dies before committing the re-creation leaves it to the next run.
    """
    say = progress or (lambda message: log.info("%s: %s", table.name, message))
    state = TableState(state_root, table.state_name)
    report = TableReport(table.name, new_run_id(), now_iso(), overrides=sorted(overrides))
    started = time.monotonic()
    try:
        gate = _Gate((quality or QualityConfig()).merged(table.quality), overrides)
        with state.lock():
            if reload:
                state.request_reload("requested with diffcdc reload")
            try:
                _run_locked(spark, table, state, report, say, gate)
            finally:
                state.prune(keep_versions)
    except Exception as exc:
        error = exc if isinstance(exc, DiffcdcError) else unexpected_error(exc)
        if error.table is None:
            error.table = table.name
        report.outcome = "failed"
        report.error = error.to_dict()
        error.report = report  # type: ignore[attr-defined]
        if error is exc:
            raise
        raise error from exc
    finally:
        report.seconds = round(time.monotonic() - started, 3)
        if os.path.isdir(state.dir):
            state.save_report(report.to_dict())
    return report


def run_many(
    spark: SparkSession,
    config: RunConfig,
    progress: Progress | None = None,
    overrides: dict[str, frozenset[str]] | None = None,
    reload: frozenset[str] = frozenset(),
) -> list[TableReport]:
    """Run every table of a config; one failing table does not stop the others.

    ``overrides`` maps a table name to the checks allowed to pass for this run; the tables
    named in ``reload`` are re-created (``diffcdc reload``).
    """
    reports = []
    for table in config.tables:
        try:
            reports.append(
                run_table(
                    spark,
                    table,
                    config.state,
                    keep_versions=config.keep_versions,
                    progress=progress,
                    quality=config.quality,
                    overrides=(overrides or {}).get(table.name, frozenset()),
                    reload=table.name in reload,
                )
            )
        except DiffcdcError as exc:
            log.error("%s", exc)
            reports.append(exc.report)  # type: ignore[attr-defined]
    return reports


_UNREADABLE = (
    "FAILED_READ_FILE",
    "CANNOT_READ_FILE_FOOTER",
    "MALFORMED",
    "is not a Parquet file",
    "PARQUET_COLUMN_DATA_TYPE_MISMATCH",
)


def unexpected_error(exc: BaseException, snapshot: SnapshotEntry | None = None) -> DiffcdcError:
    """Turn a Spark/OS exception into a one-line DiffcdcError (the trace stays chained)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if snapshot is not None and any(marker in text for marker in _UNREADABLE):
        return InputRefused(
            f"cannot read snapshot: {first[:300]}",
            snapshot=snapshot.snapshot_id,
            path=snapshot.path,
            hint="the file is corrupt or truncated; replace it and run again",
        )
    return DiffcdcError(
        f"{type(exc).__name__}: {first[:300]}",
        snapshot=snapshot.snapshot_id if snapshot else None,
        hint="run again with --debug for the full trace",
    )


@dataclass(frozen=True)
class _Gate:
    """The effective quality settings of one run of one table."""

    cfg: QualityConfig
    overrides: frozenset[str]

    def __post_init__(self) -> None:
        validate_overrides(self.overrides, self.cfg)


def _run_locked(
    spark: SparkSession,
    table: TableConfig,
    state: TableState,
    report: TableReport,
    say: Progress,
    gate: _Gate,
) -> None:
    storage = open_landing(table.landing, **table.landing_options)
    try:
        _run_with_storage(spark, table, state, report, say, gate, storage)
    finally:
        storage.close()


def _run_with_storage(
    spark: SparkSession,
    table: TableConfig,
    state: TableState,
    report: TableReport,
    say: Progress,
    gate: _Gate,
    storage: LandingStorage,
) -> None:
    folder = table_folder(table.name, table.schema_name)
    if os.path.exists(state.drop_path):
        raise StateError(
            "a drop of this table was started and has not finished",
            table=table.name,
            path=state.drop_path,
            hint=f"finish it with 'diffcdc drop --table {table.name} --yes', then run again",
        )
    # Under the lock no other run of this table uploads, so any temp file of ours is debris.
    storage.remove_temp_files(folder)
    if table.partner is not None:
        ensure_partner_events(storage, table.partner.document(), state.dir, table.name)
    request = state.reload_request()
    head = state.head()
    if head is not None and not head.published:
        if request is not None:
            # The requested re-creation drops the folder and reloads everything: finishing
            # this batch first would be wasted (and may be impossible: lost files).
            say(f"version {head.version} is left unpublished: the requested reload supersedes it")
        else:
            say(f"finishing version {head.version} left unpublished by an earlier run")
            publish_commit(state, storage, head)
            report.resumed_versions.append(head.version)
    entries = discover(table.source, table.name)
    pending = pending_snapshots(entries, state.commits(), table.name)
    if request is not None and not pending and head is not None:
        # Reload from the last committed snapshot when nothing newer is waiting.
        again = [e for e in entries if e.snapshot_id == head.snapshot_id]
        if not again:
            raise InputRefused(
                f"nothing to reload from: the last snapshot {head.snapshot_id} is no longer in "
                "the source folder",
                table=table.name,
                path=table.source,
                hint="put a current snapshot into the source folder and run again (the reload "
                "stays requested)",
            )
        pending = again
    if not pending:
        say("no new snapshot")
        report.outcome = "ok" if report.resumed_versions else "nothing to do"
        return
    for index, entry in enumerate(pending):
        head = state.head()
        try:
            result = process_snapshot(
                spark, table, state, storage, folder, entry, head, report.run_id, say, gate,
                reload_request=request if index == 0 else None,
            )
        except DiffcdcError as exc:
            exc.snapshot = exc.snapshot or entry.snapshot_id
            report.refused_gate = getattr(exc, "gate", [])
            raise
        except Exception as exc:
            raise unexpected_error(exc, entry) from exc
        report.snapshots.append(result)


def pending_snapshots(
    entries: list[SnapshotEntry], commits: list[Commit], table: str
) -> list[SnapshotEntry]:
    """Entries newer than the last committed snapshot; a late entry is refused."""
    if not commits:
        return entries
    done = {c.snapshot_id for c in commits}
    last = commits[-1].snapshot_id
    late = [e for e in entries if e.snapshot_id <= last and e.snapshot_id not in done]
    if late:
        raise LateSnapshotError(
            f"snapshot sorts at or before the last committed snapshot {last} but was never "
            "processed",
            table=table,
            snapshot=late[0].snapshot_id,
            path=late[0].path,
            hint="snapshots must arrive in lexical order; move it out of the source folder",
        )
    return [e for e in entries if e.snapshot_id > last]


def _signature(path: str) -> list[tuple[str, int, int]]:
    """Size and mtime of a snapshot's files, to notice a snapshot changing mid-run."""
    if os.path.isdir(path):
        out = []
        for name in sorted(os.listdir(path)):
            st = os.stat(os.path.join(path, name))
            out.append((name, st.st_size, st.st_mtime_ns))
        return out
    st = os.stat(path)
    return [("", st.st_size, st.st_mtime_ns)]


def process_snapshot(
    spark: SparkSession,
    table: TableConfig,
    state: TableState,
    storage: LandingStorage,
    folder: str,
    entry: SnapshotEntry,
    head: Commit | None,
    run_id: str,
    say: Progress,
    gate: _Gate,
    reload_request: dict[str, Any] | None = None,
) -> SnapshotResult:
    """Diff one snapshot against the head state, gate it, commit it and publish its files.

    When the table is re-created (``reload_request``, or a schema change under
    ``schema_policy = "recreate"``) the snapshot is diffed against nothing: a fresh initial
    load numbered from 1, published after the table folder is dropped (see publish_commit).
    """
    started = time.monotonic()
    sid = entry.snapshot_id
    signature = _signature(entry.path)
    df = read_snapshot(spark, entry, table.name, table.csv_infer_schema)
    keys = resolve_columns(df.schema, table.keys, what="key", table=table.name, snapshot=sid)
    exclude = [c for c in table.exclude if c.lower() in {n.lower() for n in df.columns}]
    check_snapshot_columns(df.schema, keys, table=table.name, snapshot=sid)
    plan = plan_landing(table, df, keys, head, sid, reload_request)
    base = None if plan.recreate else head  # what the batch is diffed and numbered against
    if plan.recreate:
        say(f"{sid}: re-creating the table ({plan.recreate['reason']})")
    published_through = (base.next_sequence if base else 1) - 1
    known = known_files(state.commits()) if base else {}
    if not plan.recreate:
        check_continuation(
            storage, folder, table=table.name, published_through=published_through, known=known
        )
    crash_point("after_read")

    version = head.version + 1 if head else 1
    first_sequence = base.next_sequence if base else 1
    vdir = state.new_version_dir(version, run_id)
    rel_vdir = os.path.relpath(vdir, state.dir)
    committed = False
    try:
        say(f"{sid}: fingerprinting and diffing (version {version})")
        metrics = _stage_state(spark, df, base, state, keys, exclude, table.fingerprint_bits, vdir)
        crash_point("after_state_staged")
        gate_started = time.monotonic()
        gates = _run_gate(df, keys, head, metrics, gate, table.name, sid)
        gate_seconds = round(time.monotonic() - gate_started, 3)
        staged_state = spark.read.parquet(os.path.join(vdir, "state"))
        changed = metrics["inserted"] + metrics["updated"] + metrics["deleted"]
        files = []
        if changed:
            changes = change_rows(
                plan.df,
                staged_state,
                keys,
                plan.columns,
                initial=base is None,
                broadcast_keys=metrics["inserted"] + metrics["updated"] <= BROADCAST_CHANGED_KEYS,
                upsert=table.upsert_default,
                single_partition=changed <= SINGLE_TASK_SORT_ROWS,
            )
            files = stage_parquet_files(
                changes,
                os.path.join(vdir, "raw"),
                os.path.join(vdir, "landing"),
                codec=table.landing_codec,
                max_rows_per_file=table.max_rows_per_file,
                first_sequence=first_sequence,
                text=plan.text,
            )
            shutil.rmtree(os.path.join(vdir, "raw"), ignore_errors=True)
            if sum(f.rows for f in files) != changed:
                raise StateError(
                    f"staged {sum(f.rows for f in files)} change rows, expected {changed}",
                    table=table.name,
                    snapshot=sid,
                    hint="internal error: nothing was published; please report it",
                )
        crash_point("after_changes_staged")
        meta = metadata_item(vdir, folder, plan.metadata)
        if _signature(entry.path) != signature:
            raise InputRefused(
                "snapshot changed while it was being processed",
                table=table.name,
                snapshot=sid,
                path=entry.path,
                hint="wait until the extract is complete, then run again",
            )
        # Again right before the commit: the landing folder may have changed meanwhile.
        if not plan.recreate:
            check_continuation(
                storage, folder, table=table.name, published_through=published_through, known=known
            )
        record = {
            "version": version,
            "table": table.name,
            "run_id": run_id,
            "snapshot_id": sid,
            "snapshot_path": os.path.abspath(entry.path),
            "version_dir": rel_vdir,
            "state_path": os.path.join(rel_vdir, "state"),
            "landing": storage.describe(),
            "landing_folder": folder,
            "metadata": {"target": meta.target, "sha256": meta.sha256, "bytes": meta.size},
            "keys": keys,
            "exclude": exclude,
            "schema": df.schema.jsonValue(),
            "fingerprint": {"version": FINGERPRINT_VERSION, "bits": table.fingerprint_bits},
            "codec": table.landing_codec,
            "metadata_document": plan.metadata,
            "landing_schema": plan.landing_schema,
            "recreate": plan.recreate,
            "drop_timeout": table.drop_timeout,
            "files": [f.to_dict() for f in files],
            "sequence": {"first": first_sequence, "next": first_sequence + len(files)},
            "counts": {k: metrics[k] for k in ("rows", "inserted", "updated", "deleted", "unchanged")},
        }
        state.claim(record)
        committed = True
        if reload_request is not None:
            state.clear_reload_request()
    finally:
        if not committed:
            shutil.rmtree(vdir, ignore_errors=True)
    crash_point("after_claim")
    commit = state.head()
    assert commit is not None and commit.version == version
    publish_commit(state, storage, commit)
    crash_point("after_published")
    counts = record["counts"]
    say(
        f"{sid}: +{counts['inserted']} ~{counts['updated']} -{counts['deleted']} "
        f"({counts['rows']} rows, {len(files)} file(s))"
    )
    return SnapshotResult(
        snapshot_id=sid,
        version=version,
        files=[f.name for f in files],
        first_sequence=first_sequence if files else None,
        seconds=round(time.monotonic() - started, 3),
        gate=[g.to_dict() for g in gates],
        gate_seconds=gate_seconds,
        recreated=plan.recreate["reason"] if plan.recreate else None,
        **counts,
    )


def _stage_state(
    spark: SparkSession,
    df: DataFrame,
    head: Commit | None,
    state: TableState,
    keys: list[str],
    exclude: list[str],
    bits: int,
    vdir: str,
) -> dict[str, int]:
    """Write the new state version (one pass over the snapshot) and return its counts."""
    fp_cols = fingerprint_columns(bits)
    narrow = df.select(*[quote(k) for k in keys], *fingerprint_exprs(df.schema, keys, exclude, bits))
    previous = spark.read.parquet(state.abspath(head.record["state_path"])) if head else None
    target = os.path.join(vdir, "state")
    classified = classify(narrow, previous, keys, fp_cols)
    classified.write.mode("errorifexists").option("compression", "zstd").parquet(target)
    # The counts come from the state just written (a narrow scan with generated code): an
    # ``observe`` on the write evaluated them row by row and cost ~0.7 s at 5M rows.
    (values,) = spark.read.parquet(target).agg(*state_metrics(keys)).collect()
    return {k: int(v or 0) for k, v in values.asDict().items()}


def _run_gate(
    df: DataFrame,
    keys: list[str],
    head: Commit | None,
    metrics: dict[str, int],
    gate: _Gate,
    table: str,
    sid: str,
) -> list[GateReport]:
    """Both quality-gate stages; a blocking failure raises QualityGateFailed (exit 3).

    The key statistics come from the pass that wrote the state, so the built-in snapshot
    checks cost no extra job; only user expectations scan the snapshot again.
    """
    previous = int(head.record["counts"]["rows"]) if head else None
    stats = SnapshotStats(metrics["rows"], metrics["null_keys"], metrics["duplicate_keys"])
    reports = [
        gate_snapshot(
            df, keys=keys, previous_rows=previous, cfg=gate.cfg, overrides=gate.overrides,
            stats=stats, table=table, snapshot=sid,
        )
    ]
    if not reports[0].failed_blocking:
        counts = ChangeCounts(
            metrics["inserted"], metrics["updated"], metrics["deleted"], metrics["rows"]
        )
        reports.append(
            gate_changes(counts, previous_rows=previous, cfg=gate.cfg, overrides=gate.overrides)
        )
    for report in reports:
        try:
            report.raise_if_failed(table, sid)
        except DiffcdcError as exc:
            exc.gate = [r.to_dict() for r in reports]  # type: ignore[attr-defined]
            raise
    return reports
