"""A table's run reports, kept beside its commit log.

Under the table's folder: ``reports/<run id>.json`` (every run that did something, passed or
failed), ``last_report.json`` (the last run, also one with nothing to do) and
``last_change.json`` (the last run that committed or published something, so a run with
nothing to do never hides the last real counts).
"""

from __future__ import annotations

from typing import Any

from diffcdc.state.records import encode_json, new_run_id, report_changed
from diffcdc.storage.base import ByteStore


class TableReports:
    """The reports of one table, in its document storage."""

    def __init__(self, storage: ByteStore) -> None:
        self.storage = storage

    def save(self, report: dict[str, Any]) -> str:
        """Keep a run's report (all three documents as they apply); where it was written."""
        path = f"reports/{report.get('run_id') or new_run_id()}.json"
        data = encode_json(report)
        self.storage.put(path, data)
        self.storage.put("last_report.json", data)
        if report_changed(report):
            self.storage.put("last_change.json", data)
        return self.storage.describe(path)

    def save_idle(self, report: dict[str, Any]) -> None:
        """Keep a run that did nothing as the table's last run (``last_report.json`` only)."""
        self.storage.put("last_report.json", encode_json(report))

    def last(self) -> dict[str, Any] | None:
        """The last run's report (None: never run)."""
        return self._read("last_report.json")

    def last_change(self) -> dict[str, Any] | None:
        """The report of the last run that committed or published something (None: never).

        State written before ``last_change.json`` existed: the newest such report in
        ``reports/`` (their names start with the run's UTC start time).
        """
        found = self._read("last_change.json")
        if found is not None:
            return found
        for name in reversed(self.storage.names("reports")):
            if name.endswith(".json") and not name.startswith("."):
                try:
                    report = self._read(f"reports/{name}")
                except ValueError:
                    continue
                if report is not None and report_changed(report):
                    return report
        return None

    def newest(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` run reports in ``reports/``, newest first (their names start
        with the run's UTC start time); one that is not valid JSON is left out."""
        out: list[dict[str, Any]] = []
        for name in reversed(self.storage.names("reports")):
            if len(out) >= limit:
                break
            if name.endswith(".json") and not name.startswith("."):
                try:
                    report = self._read(f"reports/{name}")
                except ValueError:
                    continue
                if report is not None:
                    out.append(report)
        return out

    def _read(self, path: str) -> dict[str, Any] | None:
        """The JSON object at ``path``, or None; ValueError when it is not valid JSON."""
        document = self.storage.read_json(path)
        return dict(document) if isinstance(document, dict) else None
