"""Issue 43's report attacked: hostile names and texts from state (HTML, SVG and attribute
injection through table, sink, column, hint, gate texts), numbers a browser cannot draw (NaN,
infinite, negative, huge durations and counts), zero, one and thousands of versions; the HTML
is parsed back with the standard library's parser, never with the code under test."""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser

import pytest

from diffcdc.report.model import (
    ColumnChanges,
    ColumnCount,
    GateCheck,
    Report,
    RunRow,
    RunSummary,
    SinkRow,
    TableView,
    VersionPoint,
)

pytestmark = pytest.mark.unit

EVIL = '"><script>alert(1)</script><svg onload=alert(2)><!--'
SVG_EVIL = "</title></rect><foreignObject><img src=x onerror=alert(3)></foreignObject>"
NUMERIC = {"x", "y", "x1", "x2", "y1", "y2", "width", "height"}


class _Tags(HTMLParser):
    """Every element and attribute of a document, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _run(run_id: str, seconds: float | None, *, failed: bool = False) -> RunRow:
    return RunRow(
        run_id=run_id, started_at=f"2026-11-{run_id[-2:]}T01:00:00+00:00",
        outcome="failed" if failed else "ok", seconds=seconds, versions=(1,), resumed=(),
        inserted=10**18, updated=1, deleted=0, gate=EVIL,
        checks=(GateCheck("snapshot", EVIL, "refused", EVIL, SVG_EVIL),),
        overrides=(EVIL,), error=EVIL if failed else None, hint=SVG_EVIL if failed else None,
        exit_code=3 if failed else None)


def _view(versions: int, seconds: tuple[float | None, ...]) -> TableView:
    summary = RunSummary(EVIL, EVIL, "failed", 1, 1, 2, 3, float("nan"), EVIL, SVG_EVIL)
    return TableView(
        table=EVIL, configured=True, version=versions or None, last_snapshot=EVIL,
        committed_at=EVIL, rows=10**20, unpublished=True, gate=EVIL, pending=(EVIL,),
        waiting=(EVIL, SVG_EVIL), waiting_error=EVIL, last_run=summary, last_change=summary,
        sinks=(SinkRow(EVIL, EVIL, SVG_EVIL, False, 10**19, None, (1, 2)),),
        versions=tuple(VersionPoint(v, SVG_EVIL, EVIL, 10**15 * v, v, -7 if v == 2 else 0, None, None,
                                    EVIL if v == 1 else None) for v in range(1, versions + 1)),
        runs=tuple(_run(f"r{i:02d}", s, failed=i % 2 == 0) for i, s in enumerate(seconds)),
        columns=(ColumnChanges(EVIL, SVG_EVIL, (ColumnCount(SVG_EVIL, 5), ColumnCount(EVIL, 2))),),
    )


def _render(*views: TableView) -> _Tags:
    from diffcdc.report.render import render_html

    html = render_html(Report(state=EVIL, generated_at=EVIL, diffcdc_version="0",
                              last=60, tables=views))
    parsed = _Tags()
    parsed.feed(html)
    parsed.close()
    return parsed


@pytest.mark.parametrize(("versions", "seconds"), [
    (0, ()),
    (1, (1.5,)),
    (3, (float("nan"), -4.0, float("inf"), 2.0)),
    (2500, tuple(float(i) for i in range(60))),
])
def test_hostile_texts_stay_text_and_every_chart_coordinate_is_a_finite_number(versions, seconds):
    parsed = _render(_view(versions, seconds))
    names = [tag for tag, _ in parsed.tags]
    assert "script" not in names and "img" not in names and "foreignobject" not in names
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    assert EVIL in "".join(parsed.text)  # shown, as text
    for tag, attrs in parsed.tags:
        for name in NUMERIC & attrs.keys():
            value = float(attrs[name] or "nan")
            assert math.isfinite(value), (tag, name, attrs[name])
            if name in ("width", "height") and tag == "rect":
                assert value >= 0, (tag, attrs)
    rects = [a for t, a in parsed.tags if t == "rect"]
    assert len(rects) <= 3 * min(versions, 2500) + len(seconds) + 2
    assert not re.search(r"\bnan\b|\binf\b", " ".join(
        str(v) for _, attrs in parsed.tags for v in attrs.values()), re.I)
