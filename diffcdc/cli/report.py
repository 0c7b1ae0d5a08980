"""``diffcdc report``: one self-contained HTML file of every table's versions, runs, gate
outcomes, sinks and failures (reads state only; docs/report.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from diffcdc.cli.common import config_table, state_root_of
from diffcdc.errors import StorageError, UsageError


def cmd_report(args: argparse.Namespace) -> int:
    from diffcdc.cli.status import check_root, listed_sources, status_entries
    from diffcdc.extras import require
    from diffcdc.report import REPORT
    from diffcdc.report.read import read_report, write_file
    from diffcdc.report.render import render_html

    require(REPORT)
    _check_output(args.output)
    if args.last < 1:
        raise UsageError(f"--last {args.last}: give 1 or more versions and runs per table",
                         hint="--last 60 (the default) shows each table's newest 60 versions "
                         "and runs")
    names = list(dict.fromkeys(args.table or ()))
    places: dict[str, dict[str, Any]] = {}
    if args.config:
        from diffcdc.config_file import load_config

        config = load_config(args.config)
        tables = [config_table(config, n, args.config) for n in names] if names \
            else config.tables
        state_root = state_root_of(args.state, config)
        sources = listed_sources(tables)
        names = [t.state_name for t in tables] if names else []
        places = {t.state_name: _delta_places(t) for t in tables}
    else:
        config = None
        state_root, sources = state_root_of(args.state, None), {}
    check_root(state_root, args)
    refuse_inside(args.output, guarded_folders(state_root, config))
    entries = status_entries(state_root, sources, None, list(sources))
    if names:
        known = {e["table"] for e in entries}
        missing = [n for n in names if n not in known]
        if missing:
            raise UsageError(
                f"--table {missing[0]} is not a table of the state root {state_root.location}: "
                + (f"its tables are {', '.join(sorted(known))}" if known else "it holds none"),
                hint="check --table (a table with a schema is <schema>.schema.<Table> here) "
                "and --state")
        entries = [e for e in entries if e["table"] in names]
    html = render_html(read_report(state_root, entries, last=args.last, places=places))
    try:
        write_file(args.output, html)
    except OSError as exc:
        raise StorageError(f"the report could not be written to {args.output}: "
                           f"{exc.strerror or exc}", path=args.output,
                           hint="check the folder's free space and permissions") from exc
    if not args.quiet:
        print(f"report of {len(entries)} table(s) written to {args.output} "
              f"({len(html.encode('utf-8')):,} bytes)")
    return 0


def _check_output(path: str) -> None:
    """Refuse an output whose folder is not there, or a folder, before anything is read."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"--output {path} is a folder", path=path,
                         hint="give a file name, e.g. --output report.html")
    if not os.path.isdir(folder):
        raise UsageError(f"--output {path}: the folder {folder} does not exist", path=path,
                         hint="create the folder first, or write the report elsewhere")


def guarded_folders(state_root: Any, config: Any | None) -> list[tuple[str, str, str]]:
    """The folders a report (or a metrics file) must not be written into: (folder, what it is, what would go
    wrong) for the state root, and with a config each table's source folder and sink folders."""
    from diffcdc.sinks.targets import FOLDER_KINDS
    from diffcdc.sources.registry import source_folder

    out = [] if state_root.remote else [
        (state_root.location, "the state root", "it would lie among the tables' state")]
    if config is not None and config.state_data:
        out.append((config.state_data, "the state data folder", "it would lie among state data"))
    for table in config.tables if config is not None else ():
        source = source_folder(table)
        if source is not None:
            out.append((source, f"the source folder of table {table.name}",
                        "it would be read as a snapshot"))
        out += [(owned.target.shown, f"the target of sink {owned.sink} of table {table.name}",
                 "it would be a foreign file there") for owned in table.targets()
                if owned.target.kind in FOLDER_KINDS]
    return out


def refuse_inside(output: str, guarded: list[tuple[str, str, str]], option: str = "--output",
                  what_file: str = "the report") -> None:
    """Refuse an output inside a folder diffcdc reads or writes (exit 2, nothing read yet)."""
    from diffcdc.sinks.targets import folder_location

    place = folder_location(output)
    for folder, what, why in guarded:
        around = folder_location(folder)
        if place.startswith(around.rstrip("/") + "/"):
            raise UsageError(f"{option} {output} lies inside {what} {folder}: {why}",
                             path=output, hint=f"write {what_file} outside it")


def _delta_places(table: Any) -> dict[str, Any]:
    """Where each configured Delta sink's tables are, and their storage options."""
    from diffcdc.report.columns import DeltaPlace

    return {sink.sink_id: DeltaPlace(sink.path, sink.changelog_path, dict(sink.storage_options))
            for sink in table.sinks if getattr(sink, "type", None) == "delta"}
