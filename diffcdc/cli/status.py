"""``diffcdc status``: what state and the source folders say of each table (reads only)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from diffcdc.cli.common import config_table, error_fields, state_root_of
from diffcdc.errors import DiffcdcError, UsageError


def cmd_status(args: argparse.Namespace) -> int:
    state_root, sources = _where(args)
    check_root(state_root, args)
    # With --source, the table is named by the operator: shown (its waiting snapshots) before
    # its first run too.
    configured = list(sources) if args.config or args.source else []
    # With a config, tables are their state folders (``<schema>.schema.<Table>``), as in state.
    only = next(iter(sources)) if args.config and args.table else args.table
    tables = status_entries(state_root, sources, only, configured)
    if args.json:
        print(json.dumps({"state": str(state_root), "tables": tables}, indent=1, default=str))
        return 0
    if not tables:
        print(f"no tables in state root {state_root}"
              + ("" if args.config else " (with --config, every configured table is listed)"))
        return 0
    print(format_status(tables))
    return 0


def status_entries(state_root: Any, sources: dict[str, _Listed | None], only: str | None,
                   configured: list[str]) -> list[dict[str, Any]]:
    """``status --json``'s ``tables``: each table's entry with the snapshots waiting in its
    source (``diffcdc report`` shows these very entries)."""
    from diffcdc.engine.status import table_status

    tables = table_status(state_root, only, configured=configured)
    if only and not tables:
        _unknown_table(state_root, only)
    for entry in tables:
        source = sources.get(entry["table"])
        entry["waiting"], entry["waiting_error"] = _waiting(state_root, entry["table"], source)
    return tables


def listed_sources(tables: Any) -> dict[str, _Listed | None]:
    """Each configured table's source whose waiting snapshots ``status`` lists."""
    return {t.state_name: _listed(t.state_name, t.source) for t in tables}


@dataclass(frozen=True)
class _Listed:
    """A table's source as ``status`` lists it (a :class:`~diffcdc.sources.plugin.SourceTable`
    named by the table's state folder)."""

    name: str
    source: Any
    csv_infer_schema: bool = False
    csv_encoding: str = "utf-8"
    snapshot_time: str | None = None


def _listed(name: str, source: Any) -> _Listed | None:
    """The source whose waiting snapshots ``status`` lists (None: a database's or a DataFrame's
    are known only when read)."""
    from diffcdc.sources.registry import source_plugin

    return _Listed(name, source) if source_plugin(source).capabilities.lists_waiting else None


def _where(args: argparse.Namespace) -> tuple[Any, dict[str, _Listed | None]]:
    """The state root and each table's listed source (from ``--config`` or ``--source``)."""
    if args.config:
        from diffcdc.config_file import load_config

        config = load_config(args.config)
        tables = [config_table(config, args.table, args.config)] if args.table else config.tables
        return state_root_of(args.state, config), listed_sources(tables)
    if args.source:
        if not args.table:
            raise UsageError("status --source needs --table (the table whose snapshots wait "
                             "there)", hint="or use --config FILE for every table")
        return state_root_of(args.state, None), {args.table: _listed(args.table, args.source)}
    return state_root_of(args.state, None), {}


def _unknown_table(state_root: Any, name: str) -> None:
    """``--table`` names no table of the state root: a typo is no empty answer (exit 2)."""
    from diffcdc.engine.status import table_status

    known = [t["table"] for t in table_status(state_root)]
    raise UsageError(
        f"--table {name} is not a table of the state root {state_root.location}: "
        + (f"its tables are {', '.join(known)}" if known else "it holds no table yet"),
        hint="check --table (a table with a schema is <schema>.schema.<Table> here) and --state"
        if known else "check --state: give the state root the table was run with",
    )


def check_root(state_root: Any, args: argparse.Namespace) -> None:
    """Refuse a local state root that is not there (a typo, the wrong working directory);
    with ``--config`` and its own state root, a root not made yet means nothing ran yet."""
    import os

    if state_root.remote or os.path.isdir(state_root.location):
        return
    if args.config and not args.state and not os.path.exists(state_root.location):
        return
    what = "is not a folder" if os.path.exists(state_root.location) else "does not exist"
    given = "--state" if args.state else "the default state root ./state" if not args.config \
        else "the config's state"
    raise UsageError(
        f"the state root {state_root.location} {what}",
        path=args.config,
        hint=f"check {given}: give the state root the tables were run with (--state ROOT)",
    )


def _waiting(state_root: Any, table: str, source: _Listed | None
             ) -> tuple[list[str] | None, str | None]:
    """The snapshots waiting in the table's source (None: no source known, or one whose
    snapshots are known only when read)."""
    if source is None:
        return None, None
    from diffcdc.sources.registry import build_source
    from diffcdc.state.store import TableState

    try:
        committed = [c.snapshot_id for c in TableState(state_root, table).commits()]
        pending = build_source(source).pending(committed)
    except DiffcdcError as exc:
        return None, str(exc)
    return [p.snapshot_id or "" for p in pending], None


def config_status(config: Any) -> list[dict[str, Any]]:
    """``status --json``'s tables for the tables of a loaded run config (with their waiting
    snapshots): the numbers of the metrics file (docs/metrics.md)."""
    sources = listed_sources(config.tables)
    return [t for t in status_entries(config.state_root(), sources, None, list(sources))
            if t["table"] in sources]


def format_status(tables: list[dict[str, Any]]) -> str:
    """The status table and one line per thing worth a person's attention."""
    header = ("table", "last snapshot", "version", "waiting", "rows", "last run",
              "last change", "sinks")
    rows = [header]
    for t in tables:
        waiting = t.get("waiting")
        rows.append((
            t["table"],
            str(t.get("last_snapshot") or "-"),
            str(t.get("version") or "-"),
            "?" if waiting is None else str(len(waiting)),
            str(t.get("rows") if t.get("rows") is not None else "-")
            + (f" +{t['kept']} kept" if t.get("kept") else ""),
            _run_cell(t.get("last_run") or {}, counts=False),
            _run_cell(t.get("last_change") or {}, counts=True),
            ", ".join(f"{s['sink']}:{'published' if s['published'] else 'UNPUBLISHED'}"
                      for s in t.get("sinks", [])) or "-",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for t in tables:
        name, last = t["table"], t.get("last_run") or {}
        if t.get("waiting"):
            lines.append(f"{name}: waiting: {', '.join(t['waiting'])}")
        if t.get("waiting_error"):
            lines.append(f"{name}: source: {t['waiting_error']}")
        if last.get("error"):
            detail = last.get("error_detail") or {}
            error = DiffcdcError(**error_fields({"message": last["error"], "table": name, **detail}))
            lines.append(f"{name}: last run failed {_when(last)}: {error}")
        if t.get("gate"):
            lines.append(f"{name}: quality gate: {t['gate']}")
        if t.get("unpublished"):
            waiting_sinks = ", ".join(s["sink"] for s in t.get("sinks", []) if not s["published"])
            lines.append(f"{name}: version {t['version']} is committed but not yet published by "
                         f"sink(s) {waiting_sinks}; the next run finishes it")
        for item in t.get("pending", []):
            lines.append(f"{name}: pending: {item}")
        if t.get("configured") and t.get("version") is None:
            lines.append(f"{name}: no snapshot committed yet")
    return "\n".join(lines)


def _when(run: dict[str, Any]) -> str:
    started = str(run.get("started_at") or "")
    return started[:19].replace("T", " ") + "Z" if started else "-"


def _run_cell(run: dict[str, Any], counts: bool) -> str:
    if not run:
        return "-"
    if counts:
        return f"{_when(run)} +{run['inserted']} ~{run['updated']} -{run['deleted']}"
    return f"{_when(run)} {run.get('outcome') or '-'}"
