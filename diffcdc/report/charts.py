"""The report's charts as inline SVG geometry: pure, no IO (the template draws the marks).

Drawn by the report's own code, not a charting library: a report of 500 tables holds about
1,000 charts, which as SVG cost a few KB each and need no script to show; Plotly inlines
a bundle of about 4 MB and draws every chart in the browser when the file opens (seconds for
a thousand charts); Vega-Lite through Altair inlines its scripts only with ``vl-convert``, a
native package of its own, and also draws in the browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from diffcdc.report.model import RunRow, VersionPoint

WIDTH = 640
HEIGHT = 160
#: Room for the axis labels: left, top, right, bottom.
LEFT, TOP, RIGHT, BOTTOM = 56, 10, 8, 22


@dataclass(frozen=True)
class Bar:
    """One mark: a rectangle of a kind (its CSS class and legend entry), with its tooltip."""

    x: float
    y: float
    width: float
    height: float
    kind: str
    title: str
    label: str = ""  #: a name shown left of the bar (the columns chart)


@dataclass(frozen=True)
class Chart:
    name: str  #: what it shows (its data-chart attribute)
    caption: str
    bars: tuple[Bar, ...]
    y_max: str  #: the top of the axis
    first: str  #: the label under the first bar
    last: str  #: the label under the last bar
    kinds: tuple[str, ...]  #: the legend
    width: int = WIDTH
    height: int = HEIGHT
    horizontal: bool = False  #: bars from a left axis (labelled per bar), no value axis

    @property
    def left(self) -> float:
        return self.bars[0].x if self.horizontal else LEFT

    @property
    def baseline(self) -> float:
        return self.height - BOTTOM

    @property
    def right(self) -> float:
        return self.width - RIGHT


def changes_chart(points: Sequence[VersionPoint]) -> Chart | None:
    """Inserted, updated and deleted rows per version, stacked (None: no version)."""
    if not points:
        return None
    top = max(max(p.inserted + p.updated + p.deleted for p in points), 1)
    bars = []
    for slot, (x, width) in enumerate(_slots(len(points))):
        p = points[slot]
        y = float(HEIGHT - BOTTOM)
        for kind, count in (("inserted", p.inserted), ("updated", p.updated),
                            ("deleted", p.deleted)):
            height = _height(count, top)
            y -= height
            if count:
                bars.append(Bar(x, round(y, 2), width, height, kind,
                                f"version {p.version} ({p.snapshot_id}): {count} {kind}"))
    return Chart("changes", "Rows inserted, updated and deleted per version", tuple(bars),
                 _number(top), f"v{points[0].version}", f"v{points[-1].version}",
                 ("inserted", "updated", "deleted"))


def durations_chart(runs: Sequence[RunRow]) -> Chart | None:
    """Each run's seconds, oldest first, by outcome (None: no run recorded its seconds; a
    value no clock gives, NaN, infinite or negative, from a state edited by hand, is left out:
    an SVG length of ``nan`` is an error in the browser and draws nothing)."""
    timed = [r for r in reversed(runs) if _drawable(r.seconds)]
    if not timed:
        return None
    top = max(max(float(r.seconds or 0) for r in timed), 0.001)
    bars = []
    for run, (x, width) in zip(timed, _slots(len(timed))):
        seconds = float(run.seconds or 0)
        height = max(_height(seconds, top), 1.0)
        kind = "failed" if run.outcome == "failed" else "ok" if run.versions or run.resumed \
            else "idle"
        bars.append(Bar(x, round(HEIGHT - BOTTOM - height, 2), width, height, kind,
                        f"run {run.run_id}: {seconds:g} s, {run.outcome}"))
    return Chart("durations", "Run duration (seconds), oldest run first", tuple(bars),
                 f"{top:g} s", _day(timed[0].started_at), _day(timed[-1].started_at),
                 ("ok", "idle", "failed"))


def column_chart(name: str, counts: Sequence[tuple[str, int]]) -> Chart | None:
    """Horizontal bars: update rows per column, most first (None: no column counted)."""
    if not counts:
        return None
    top = max(n for _, n in counts)
    row = 18
    height = TOP + row * len(counts) + BOTTOM
    span = WIDTH - 180 - RIGHT
    bars = tuple(Bar(180, TOP + i * row + 2, max(round(span * n / top, 2), 1.0), row - 4,
                     "updated", f"{column}: {n} update rows", _short(column))
                 for i, (column, n) in enumerate(counts))
    return Chart(name, "Update rows that changed each column", bars, _number(top), "", "",
                 ("updated",), height=height, horizontal=True)


def _slots(n: int) -> list[tuple[float, float]]:
    """The x and width of ``n`` bars across the plot (a gap between bars while they are
    wide enough to keep one)."""
    span = WIDTH - LEFT - RIGHT
    step = span / n
    width = step * 0.8 if step >= 4 else step
    return [(round(LEFT + i * step, 2), round(max(width, 0.5), 2)) for i in range(n)]


def _drawable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value >= 0


def _height(value: float, top: float) -> float:
    return round((HEIGHT - TOP - BOTTOM) * max(value, 0) / top, 2)


def _number(value: int) -> str:
    return f"{value:,}"


def _short(name: str, most: int = 28) -> str:
    """A column name that fits left of its bar (the bar's tooltip holds it whole)."""
    return name if len(name) <= most else name[: most - 1] + "…"


def _day(stamp: str) -> str:
    return stamp[:16].replace("T", " ")
