"""The report as one HTML document: pure, no IO (:mod:`.read` writes it)."""

from __future__ import annotations

from dataclasses import dataclass

from diffcdc.report import charts
from diffcdc.report.model import Report, TableView


@dataclass(frozen=True)
class TableCharts:
    """A table's charts (None: nothing to draw)."""

    changes: charts.Chart | None
    durations: charts.Chart | None
    columns: tuple[charts.Chart | None, ...]  #: one per entry of the view's ``columns``


def table_charts(view: TableView) -> TableCharts:
    """A table's charts: changes per version, run durations, most-changed columns."""
    return TableCharts(
        charts.changes_chart(view.versions), charts.durations_chart(view.runs),
        tuple(charts.column_chart(f"columns:{c.sink}", [(x.column, x.updates) for x in c.counts])
              for c in view.columns))


def render_html(report: Report) -> str:
    """The whole document: styles inline, charts as inline SVG, no script."""
    from jinja2 import Environment, StrictUndefined

    from diffcdc.report.template import TEMPLATE

    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True)
    return env.from_string(TEMPLATE).render(
        report=report, sections=[(t, table_charts(t)) for t in report.tables],
        left=charts.LEFT, top=charts.TOP)
