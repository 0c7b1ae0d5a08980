"""What ``diffcdc status`` shows: per table, its head version and last run (reads state only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from diffcdc.errors import StateError
from diffcdc.sinks.openmirroring.shorthand import headline
from diffcdc.sinks.registry import sink_status
from diffcdc.state.chain import state_chain
from diffcdc.state.records import sink_backlog
from diffcdc.state.root import StateRoot
from diffcdc.state.store import Commit, TableState


def table_status(
    state_root: StateRoot | str, only: str | None = None, configured: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """One dict per table (sorted by name): every table in ``configured`` (also one without
    state yet), and every folder of ``state_root`` that holds a table — a commit, or a reload
    or drop request. A folder a failed first run left behind (older diffcdc) is no table."""
    root = StateRoot.of(state_root)
    names = set(root.table_names())
    out = []
    for name in sorted(names | set(configured)):
        if (only and name != only) or name.startswith((".", "_")):  # .dropped-*, _logs
            continue
        state = TableState(root, name)
        if name not in configured and not state.has_history():
            continue
        out.append(_table_entry(state, name in configured))
    return out


def _table_entry(state: TableState, configured: bool) -> dict[str, Any]:
    head = state.head()
    report = state.reports.last() or {}
    change = state.reports.last_change() or {}
    sinks = _sinks(head) if head else []
    _add_backlogs(state, sinks)
    landing = headline(sinks)
    entry: dict[str, Any] = {
        "table": state.table,
        "configured": configured,
        "last_snapshot": head.snapshot_id if head else None,
        "version": head.version if head else None,
        "committed_at": head.record.committed_at if head else None,
        "snapshot_time": head.record.snapshot_time if head else None,  # its as-of time
        "next_sequence": landing.next_sequence if landing else None if head else 1,
        "rows": head.record.counts.rows if head else None,
        "state": _state_summary(state) if head else None,
        "landing": landing.landing if landing else None,
        "sinks": sinks,
        "unpublished": bool(head and not head.published),
        "last_run": _run_summary(report),
        "last_change": _run_summary(change),
    }
    if head is not None and head.record.scope is not None:  # a scoped table (docs/scope.md)
        scope = head.record.scope
        entry["kept"] = head.record.counts.kept
        entry["scope"] = {"columns": scope.columns, "where": scope.where,
                          "unknown": scope.unknown}
    entry["gate"] = _gate_summary(report)
    entry["pending"] = _pending(state)
    return entry


def _state_summary(state: TableState) -> dict[str, Any]:
    """The head's state as stored: the version of its base, how many deltas lie on it and
    their bytes as the commits recorded them (None: a version from before manifests)."""
    chain = state_chain(state.commits())
    manifests = [link.manifest for link in chain]
    return {
        "base": chain[0].version,
        "deltas": len(chain) - 1,
        "bytes": sum(f.bytes for m in manifests if m for f in m.files)
        if all(manifests) else None,
    }


def _run_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What ``status`` shows of one run report (empty: no such run)."""
    if not report:
        return {}
    snaps = report.get("snapshots", [])
    error = report.get("error") or {}
    return {
        "run_id": report.get("run_id"),
        "started_at": report.get("started_at", ""),
        "outcome": report.get("outcome"),
        "snapshots": len(snaps),
        "last_snapshot": snaps[-1]["snapshot_id"] if snaps else None,
        "resumed_versions": report.get("resumed_versions", []),
        "inserted": sum(s["inserted"] for s in snaps),
        "updated": sum(s["updated"] for s in snaps),
        "deleted": sum(s["deleted"] for s in snaps),
        "seconds": report.get("seconds"),
        "error": error.get("message"),
        "error_detail": {k: error.get(k) for k in ("snapshot", "path", "hint")} if error else None,
    }


def _sinks(head: Commit) -> list[dict[str, Any]]:
    """Per sink of the head version: its type, where it publishes, whether it has published."""
    return [{"sink": sink_id, "type": entry.type, "published": sink_id in head.published_sinks,
             "rows": entry.manifest.get("rows"), **sink_status(entry.type, entry.manifest)}
            for sink_id, entry in head.record.sinks.items()]


def _add_backlogs(state: TableState, sinks: list[dict[str, Any]]) -> None:
    """Each sink's ``backlog``: the committed versions it has yet to publish (the metrics
    file's per-sink backlog, docs/metrics.md)."""
    if not sinks:
        return
    commits = state.commits()
    for sink in sinks:
        sink["backlog"] = len(sink_backlog(commits, sink["sink"]))


def _pending(state: TableState) -> list[str]:
    """Operator requests recorded in state but not carried out yet (reload, a broken drop)."""
    pending = []
    try:
        reload = state.requests.pending_reload()
    except StateError as exc:  # damaged: runs refuse the table until it is dealt with
        pending.append(str(exc))
    else:
        if reload is not None:
            pending.append(
                f"re-creation requested {reload.requested_at} "
                f"({reload.reason}): the next run drops the table folder and "
                "publishes a fresh initial load"
            )
    drop = _read_json(state, state.requests.DROP)
    if drop is not None:
        pending.append(
            f"drop of {drop.get('folder', '?')} started {drop.get('requested_at', '')} did not "
            "finish: run `diffcdc drop` again; runs refuse the table until then"
        )
    return pending


def _read_json(state: TableState, path: str) -> dict[str, Any] | None:
    try:
        value = state.read_document(path)
    except ValueError:  # damaged: still worth showing that something is pending
        return {}
    return None if value is None else value if isinstance(value, dict) else {}


def _gate_summary(report: dict[str, Any]) -> str | None:
    """One line about the last run's quality gate (refusal, overrides, warnings)."""
    from diffcdc.core.quality_report import GateReport

    stages = report.get("refused_gate") or next(
        (s.get("gate") for s in reversed(report.get("snapshots", [])) if s.get("gate")), None
    )
    if not stages:
        return None
    parts = [GateReport.from_dict(stage).summary() for stage in stages]
    return "; ".join(p for p in parts if p)
