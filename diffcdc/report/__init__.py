"""``diffcdc report``: one self-contained HTML file of what state knows of each table.

:mod:`~diffcdc.report.model` holds the typed records; :mod:`~diffcdc.report.gather` builds them
from what ``status`` shows, the commit records and the run reports (pure: no IO);
:mod:`~diffcdc.report.columns` counts a Delta sink's changed columns; :mod:`~diffcdc.report.charts`
lays out the charts as inline SVG and :mod:`~diffcdc.report.render` writes the HTML (Jinja2);
:mod:`~diffcdc.report.read` is the IO at the edge (state, the Delta tables, the output file).
See docs/report.md.
"""

from diffcdc.extras import Extra

#: The report's extra: Jinja2, the template engine (auto-escaped names and messages).
REPORT = Extra("report", "diffcdc report", "the jinja2 library", ("jinja2",))
