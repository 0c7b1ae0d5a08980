"""The end-of-run summary for people: one row per table, a totals line, and what a run
published of an earlier run's backlog (``run``, ``reload``, ``rollback`` and ``demo``)."""

from __future__ import annotations

from typing import Any

from diffcdc.cli.common import error_fields
from diffcdc.errors import DiffcdcError


def format_summary(reports: list[dict[str, Any]]) -> str:
    """The end-of-run table for people."""
    header = ("table", "outcome", "snapshots", "inserted", "updated", "deleted", "files", "seconds")
    rows = [header]
    for r in reports:
        snaps = r.get("snapshots", [])
        rows.append((
            r["table"],
            r["outcome"],
            str(len(snaps)),
            str(sum(s["inserted"] for s in snaps)),
            str(sum(s["updated"] for s in snaps)),
            str(sum(s["deleted"] for s in snaps)),
            str(sum(len(s["files"]) for s in snaps)),
            f"{r.get('seconds', 0):.1f}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for r in reports:
        if (line := backlog_line(r)) is not None:
            lines.append(line)
        lines.extend(refingerprint_lines(r))
        if r.get("error"):
            lines.append(f"{r['table']}: {DiffcdcError(**error_fields(r['error']))}")
    return "\n".join(lines)


def refingerprint_lines(report: dict[str, Any]) -> list[str]:
    """One line per version that re-fingerprinted the table (its rule changed)."""
    return [f"{report['table']}: version {s['version']} re-fingerprinted the table "
            f"({s['refingerprinted']}); no row counted as changed because of it"
            for s in report.get("snapshots", []) if s.get("refingerprinted")]


def backlog_line(report: dict[str, Any]) -> str | None:
    """What a run published of the versions an earlier run committed and left unpublished."""
    done = report.get("backlog_published") or {}
    if not done:
        return None
    by_versions: dict[tuple[int, ...], list[str]] = {}
    for sink, versions in done.items():
        by_versions.setdefault(tuple(versions), []).append(sink)
    parts = [f"version{'s' if len(v) > 1 else ''} {', '.join(map(str, v))} to sink"
             f"{'s' if len(sinks) > 1 else ''} {', '.join(sinks)}"
             for v, sinks in by_versions.items()]
    return (f"{report['table']}: published {'; '.join(parts)} (committed by an earlier run, "
            "left unpublished)")


def totals_line(reports: list[dict[str, Any]], seconds: float) -> str:
    """One line of totals over every table of the run."""
    outcomes: dict[str, int] = {}
    for r in reports:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    snaps = [s for r in reports for s in r.get("snapshots", [])]
    kinds = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none"
    backlog = sum(len(r.get("resumed_versions") or ()) for r in reports)
    return (f"total: {len(reports)} table(s) ({kinds}); {len(snaps)} snapshot(s), "
            f"+{sum(s['inserted'] for s in snaps)} ~{sum(s['updated'] for s in snaps)} "
            f"-{sum(s['deleted'] for s in snaps)}"
            + (f" ({kept} kept outside a snapshot's scope)" if (kept := sum(
                s.get("kept", 0) for s in snaps)) else "")
            + f", {sum(len(s['files']) for s in snaps)} "
            f"file(s)" + (f", {backlog} version(s) of the backlog published" if backlog else "")
            + f"; {seconds:.1f} s")
