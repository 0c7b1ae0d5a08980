"""The report's HTML template (Jinja2, auto-escaped): every style inline, no script, nothing
fetched when the file is opened."""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="diffcdc {{ report.diffcdc_version }}">
<title>diffcdc report: {{ report.state }}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em;
       color: #1d2330; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: .2em; }
h2 { font-size: 1.2em; margin: 2em 0 .4em; padding-top: .6em; border-top: 2px solid #d5dae3; }
h3 { font-size: 1em; margin: 1.2em 0 .3em; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { padding: .2em .7em; border-bottom: 1px solid #e3e6ec; text-align: left;
         vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.meta { color: #5b6475; }
.bad { color: #b42318; font-weight: 600; }
.warn { color: #9a5b00; }
.good { color: #18794e; }
.hint { color: #5b6475; font-style: italic; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .1em 1em; margin: .3em 0; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
figure { margin: .5em 0; }
figcaption { color: #5b6475; font-size: .9em; }
svg text { font: 11px system-ui, sans-serif; fill: #5b6475; }
svg .axis { stroke: #9aa3b2; stroke-width: 1; }
.inserted { fill: #2e7d32; } .updated { fill: #1565c0; } .deleted { fill: #c62828; }
.ok { fill: #2e7d32; } .idle { fill: #9aa3b2; } .failed { fill: #c62828; }
.legend span { display: inline-block; margin-right: 1em; font-size: .9em; }
.legend i { display: inline-block; width: .8em; height: .8em; margin-right: .3em; }
.legend i.inserted, .legend i.ok { background: #2e7d32; }
.legend i.updated { background: #1565c0; }
.legend i.deleted, .legend i.failed { background: #c62828; }
.legend i.idle { background: #9aa3b2; }
details > summary { cursor: pointer; color: #1565c0; margin: .4em 0; }
</style>
</head>
<body>
{% macro svg(chart) %}
<figure data-chart="{{ chart.name }}">
<svg xmlns="http://www.w3.org/2000/svg" width="{{ chart.width }}" height="{{ chart.height }}"
 viewBox="0 0 {{ chart.width }} {{ chart.height }}" role="img" aria-label="{{ chart.caption }}">
<line class="axis" x1="{{ chart.left }}" y1="{{ top }}" x2="{{ chart.left }}" y2="{{ chart.baseline }}"/>
{% if not chart.horizontal %}
<line class="axis" x1="{{ chart.left }}" y1="{{ chart.baseline }}" x2="{{ chart.right }}" y2="{{ chart.baseline }}"/>
<text x="{{ chart.left - 4 }}" y="{{ top + 9 }}" text-anchor="end">{{ chart.y_max }}</text>
<text x="{{ chart.left - 4 }}" y="{{ chart.baseline }}" text-anchor="end">0</text>
<text x="{{ chart.left }}" y="{{ chart.height - 6 }}">{{ chart.first }}</text>
<text x="{{ chart.right }}" y="{{ chart.height - 6 }}" text-anchor="end">{{ chart.last }}</text>
{% endif %}
{% for bar in chart.bars %}{% if bar.label %}<text x="{{ bar.x - 6 }}" y="{{ bar.y + bar.height - 2 }}" text-anchor="end">{{ bar.label }}</text>{% endif %}<rect class="{{ bar.kind }}" x="{{ bar.x }}" y="{{ bar.y }}" width="{{ bar.width }}" height="{{ bar.height }}"><title>{{ bar.title }}</title></rect>
{% endfor %}</svg>
<figcaption>{{ chart.caption }} <span class="legend">{% for kind in chart.kinds %}<span><i class="{{ kind }}"></i>{{ kind }}</span>{% endfor %}</span></figcaption>
</figure>
{% endmacro %}
<h1>diffcdc report</h1>
<p class="meta">State root <code data-field="state">{{ report.state }}</code>; made
{{ report.generated_at }} by diffcdc {{ report.diffcdc_version }}; the newest
{{ report.last }} versions and run reports of each table. Figures are those of
<code>diffcdc status --json</code>.</p>
{% if not report.tables %}<p>No tables in this state root.</p>{% endif %}
{% if report.tables %}
<table id="overview">
<thead><tr><th>table</th><th>version</th><th>rows</th><th>waiting</th><th>last run</th>
<th>last change (+ ~ &minus;)</th><th>backlog</th><th>failed runs</th></tr></thead>
<tbody>
{% for t in report.tables %}
<tr data-table="{{ t.table }}">
<td><a href="#t{{ loop.index }}">{{ t.table }}</a></td>
<td class="n">{{ t.version if t.version is not none else "-" }}</td>
<td class="n">{{ t.rows if t.rows is not none else "-" }}</td>
<td class="n">{{ t.waiting|length if t.waiting is not none else "?" }}</td>
<td{% if t.last_run and t.last_run.outcome == "failed" %} class="bad"{% endif %}>
{{ t.last_run.outcome if t.last_run else "-" }}</td>
<td>{% if t.last_change %}+{{ t.last_change.inserted }} ~{{ t.last_change.updated }}
&minus;{{ t.last_change.deleted }}{% else %}-{% endif %}</td>
<td class="n{% if t.backlog %} bad{% endif %}">{{ t.backlog }}</td>
<td class="n{% if t.failures %} warn{% endif %}">{{ t.failures|length }}</td>
</tr>
{% endfor %}
</tbody></table>
{% endif %}

{% for t, charts in sections %}
<section class="table" id="t{{ loop.index }}" data-table="{{ t.table }}">
<h2>{{ t.table }}</h2>
<dl class="facts">
<dt>version</dt><dd data-field="version">{{ t.version if t.version is not none else "-" }}</dd>
<dt>last snapshot</dt><dd data-field="last_snapshot">{{ t.last_snapshot or "-" }}</dd>
<dt>committed</dt><dd data-field="committed_at">{{ t.committed_at or "-" }}</dd>
<dt>rows</dt><dd data-field="rows">{{ t.rows if t.rows is not none else "-" }}</dd>
<dt>waiting</dt><dd data-field="waiting">{% if t.waiting is none %}?{% else %}{{ t.waiting|length }}{% if t.waiting %}: {{ t.waiting|join(", ") }}{% endif %}{% endif %}</dd>
{% if t.waiting_error %}<dt>source</dt><dd class="bad">{{ t.waiting_error }}</dd>{% endif %}
<dt>published</dt><dd data-field="unpublished">{% if t.unpublished %}<span class="bad">version {{ t.version }} not yet published by every sink: the next run finishes it</span>{% elif t.version is not none %}<span class="good">every sink</span>{% else %}-{% endif %}</dd>
<dt>quality gate</dt><dd data-field="gate">{{ t.gate or "-" }}</dd>
{% for item in t.pending %}<dt>pending</dt><dd class="warn" data-field="pending">{{ item }}</dd>{% endfor %}
</dl>

<h3>Last run and last change</h3>
<table class="runs-summary">
<thead><tr><th></th><th>started</th><th>outcome</th><th>snapshots</th><th>inserted</th>
<th>updated</th><th>deleted</th><th>seconds</th><th>error</th></tr></thead>
<tbody>
{% for label, run in (("last_run", t.last_run), ("last_change", t.last_change)) %}
<tr data-run="{{ label }}">
<th>{{ label|replace("_", " ") }}</th>
{% if run %}
<td data-field="started_at">{{ run.started_at }}</td>
<td data-field="outcome"{% if run.outcome == "failed" %} class="bad"{% endif %}>{{ run.outcome or "-" }}</td>
<td class="n" data-field="snapshots">{{ run.snapshots }}</td>
<td class="n" data-field="inserted">{{ run.inserted }}</td>
<td class="n" data-field="updated">{{ run.updated }}</td>
<td class="n" data-field="deleted">{{ run.deleted }}</td>
<td class="n" data-field="seconds">{{ run.seconds if run.seconds is not none else "-" }}</td>
<td>{% if run.error %}<span class="bad" data-field="error">{{ run.error }}</span>{% if run.hint %}<br><span class="hint">{{ run.hint }}</span>{% endif %}{% endif %}</td>
{% else %}<td colspan="8">none</td>{% endif %}
</tr>
{% endfor %}
</tbody></table>

<h3>Sinks</h3>
{% if t.sinks %}
<table class="sinks">
<thead><tr><th>sink</th><th>type</th><th>target</th><th>head version</th><th>rows</th>
<th>last published version</th><th>backlog</th></tr></thead>
<tbody>
{% for s in t.sinks %}
<tr data-sink="{{ s.sink }}">
<td>{{ s.sink }}</td><td>{{ s.type }}</td><td><code>{{ s.target or "-" }}</code></td>
<td data-field="published" class="{{ 'good' if s.published else 'bad' }}">{{ "published" if s.published else "UNPUBLISHED" }}</td>
<td class="n" data-field="rows">{{ s.rows if s.rows is not none else "-" }}</td>
<td class="n" data-field="published_version">{{ s.published_version if s.published_version is not none else "-" }}</td>
<td class="n{% if s.backlog %} bad{% endif %}" data-field="backlog" data-versions="{{ s.backlog|join(',') }}">{{ s.backlog|length }}{% if s.backlog %} (version{{ "s" if s.backlog|length > 1 }} {{ s.backlog|join(", ") }}){% endif %}</td>
</tr>
{% endfor %}
</tbody></table>
{% else %}<p>No committed version yet.</p>{% endif %}

<h3>Versions over time</h3>
{% if charts.changes %}{{ svg(charts.changes) }}{% else %}<p>No version committed yet.</p>{% endif %}
{% if charts.durations %}{{ svg(charts.durations) }}{% endif %}

<h3>Most-changed columns</h3>
{% for c in t.columns %}
<p class="meta">Sink {{ c.sink }}, versions {{ c.since }} on, read from <code>{{ c.source }}</code>:</p>
{% if c.problem %}<p class="warn" data-field="columns-problem">not readable: {{ c.problem }}</p>
{% elif not c.counts %}<p>No update has changed a column yet.</p>
{% else %}
{{ svg(charts.columns[loop.index0]) }}
<table class="columns" data-sink="{{ c.sink }}"><thead><tr><th>column</th><th>update rows</th></tr></thead><tbody>
{% for cc in c.counts %}<tr><td>{{ cc.column }}</td><td class="n">{{ cc.updates }}</td></tr>{% endfor %}
</tbody></table>
{% endif %}
{% else %}
<p class="meta">No sink of this table keeps changed-column lists (a Delta sink with
<code>changelog_path</code>, or with <code>mode = "scd2"</code>, does); state counts rows, not
columns.</p>
{% endfor %}

<h3>Quality gate outcomes and overrides</h3>
{% set gated = t.runs|selectattr("gate")|list %}
{% set notable = gated|selectattr("notable")|list %}
<p data-field="gate-runs">{{ gated|length - notable|length }} of the {{ gated|length }} run(s) with a gate result passed it without a warning or an override.</p>
{% if notable %}
<table class="gate"><thead><tr><th>run started</th><th>outcome</th><th>gate</th><th>overrides</th><th>checks that did not pass</th></tr></thead><tbody>
{% for r in notable %}
<tr data-run-id="{{ r.run_id }}"><td>{{ r.started_at }}</td><td{% if r.refused %} class="bad"{% endif %}>{{ r.outcome }}</td><td>{{ r.gate }}</td>
<td>{{ r.overrides|join(", ") or "-" }}</td>
<td>{% for c in r.checks %}<div class="{{ 'bad' if c.outcome == 'refused' else 'warn' }}">{{ c.stage }}: {{ c.name }} {{ c.outcome }} (observed {{ c.observed or "-" }}{% if c.threshold %}, threshold {{ c.threshold }}{% endif %})</div>{% else %}-{% endfor %}</td></tr>
{% endfor %}
</tbody></table>
{% endif %}

<h3>Failed runs and refusals</h3>
{% if t.failures %}
<table class="failures"><thead><tr><th>run started</th><th>exit</th><th>error</th><th>what to do</th></tr></thead><tbody>
{% for r in t.failures %}
<tr data-run-id="{{ r.run_id }}"><td>{{ r.started_at }}</td><td class="n">{{ r.exit_code if r.exit_code is not none else "-" }}{% if r.refused %} (refused){% endif %}</td>
<td class="bad" data-field="error">{{ r.error }}</td><td class="hint" data-field="hint">{{ r.hint or "-" }}</td></tr>
{% endfor %}
</tbody></table>
<p class="meta">Each failure's full trace is in its run's log file (<code>_logs/</code> of the
state root; the last 30 runs are kept).</p>
{% else %}<p>None in the run reports read.</p>{% endif %}

<details><summary>Versions ({{ t.versions|length }})</summary>
<table class="versions"><thead><tr><th>version</th><th>snapshot</th><th>committed</th><th>inserted</th>
<th>updated</th><th>deleted</th><th>rows</th><th>seconds</th><th></th></tr></thead><tbody>
{% for v in t.versions|reverse %}
<tr data-version="{{ v.version }}"><td class="n">{{ v.version }}</td><td>{{ v.snapshot_id }}</td><td>{{ v.at }}</td>
<td class="n">{{ v.inserted }}</td><td class="n">{{ v.updated }}</td><td class="n">{{ v.deleted }}</td>
<td class="n">{{ v.rows if v.rows is not none else "-" }}</td><td class="n">{{ v.seconds if v.seconds is not none else "-" }}</td>
<td>{{ ("re-created: " ~ v.recreated) if v.recreated else "" }}</td></tr>
{% endfor %}
</tbody></table></details>

<details><summary>Runs ({{ t.runs|length }})</summary>
<table class="all-runs"><thead><tr><th>started</th><th>outcome</th><th>versions</th><th>published for earlier runs</th>
<th>inserted</th><th>updated</th><th>deleted</th><th>seconds</th></tr></thead><tbody>
{% for r in t.runs %}
<tr data-run-id="{{ r.run_id }}"><td>{{ r.started_at }}</td><td{% if r.outcome == "failed" %} class="bad"{% endif %}>{{ r.outcome }}</td>
<td>{{ r.versions|join(", ") or "-" }}</td><td>{{ r.resumed|join(", ") or "-" }}</td>
<td class="n">{{ r.inserted }}</td><td class="n">{{ r.updated }}</td><td class="n">{{ r.deleted }}</td>
<td class="n">{{ r.seconds if r.seconds is not none else "-" }}</td></tr>
{% endfor %}
</tbody></table></details>
</section>
{% endfor %}
</body>
</html>
"""
