"""``diffcdc report`` of a real config (tests/support/report_state.py: three tables, several
versions each, a gate refusal and its override, a Delta sink with a backlog) opened in Debian's
headless Chromium through Selenium: no console error, every chart drawn, nothing fetched, and
every figure shown equal to ``status --json``'s (the Delta changelog's columns counted by
deltalake itself)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import pytest

from diffcdc.cli.main import main

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: The flags the closed network needs (no first-run, update, sync or QUIC traffic).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1100,1500")


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium (Debian's, driven by its chromedriver: nothing is downloaded)."""
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("chromium / chromium-driver not installed (apt-get install chromium "
                    "chromium-driver; .ci/install test does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _text(element, css: str) -> str:
    from selenium.webdriver.common.by import By

    return element.find_element(By.CSS_SELECTOR, css).text.strip()


def _shown(value) -> str:
    return "-" if value is None else str(value)


def _changelog_columns(path: str) -> Counter:
    """The changelog's ``__CHANGED_COLUMNS`` counted by deltalake and Python (not diffcdc)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = pa.table(DeltaTable(path).to_pyarrow_table(columns=["__CHANGED_COLUMNS"]))
    return Counter(c for row in table.column(0).to_pylist() if row for c in row)


def test_the_report_opens_offline_with_its_charts_and_status_figures(
        spark, tmp_path, monkeypatch, capsys, cli_logging, browser):
    from selenium.webdriver.common.by import By

    from tests.support.report_state import build

    monkeypatch.chdir(tmp_path)
    made = build(tmp_path, main, monkeypatch)
    assert made.exits == (0, 3, 1)
    capsys.readouterr()
    assert main(["status", "--config", str(made.config), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    output = tmp_path / "out" / "report.html"
    output.parent.mkdir()
    assert main(["report", "--config", str(made.config), "--output", str(output)]) == 0
    assert f"report of 3 table(s) written to {output}" in capsys.readouterr().out

    browser.get(output.as_uri())
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(url.startswith(("data:", "blob:")) for url in fetched), fetched
    shot = os.environ.get("DIFFCDC_REPORT_SCREENSHOT") or str(tmp_path / "report.png")
    assert browser.save_screenshot(shot) and os.path.getsize(shot) > 10_000

    entries = {t["table"]: t for t in status["tables"]}
    assert sorted(entries) == ["Customers", "Items", "Orders"]
    overview = {row.get_attribute("data-table"): row
                for row in browser.find_elements(By.CSS_SELECTOR, "#overview tbody tr")}
    assert sorted(overview) == sorted(entries)
    for name, entry in entries.items():
        section = browser.find_element(By.CSS_SELECTOR, f'section[data-table="{name}"]')
        for field in ("version", "last_snapshot", "committed_at", "rows"):
            assert _text(section, f'dd[data-field="{field}"]') == _shown(entry[field]), field
        assert _text(section, 'dd[data-field="waiting"]') == str(len(entry["waiting"]))
        assert _text(section, 'dd[data-field="gate"]') == _shown(entry["gate"])
        for label in ("last_run", "last_change"):
            run, row = entry[label], section.find_element(By.CSS_SELECTOR,
                                                          f'tr[data-run="{label}"]')
            for field in ("started_at", "outcome", "snapshots", "inserted", "updated", "deleted",
                          "seconds"):
                assert _text(row, f'[data-field="{field}"]') == _shown(run[field]), (name, field)
            if run["error"]:
                assert _text(row, '[data-field="error"]') == run["error"]
        for sink in entry["sinks"]:
            row = section.find_element(By.CSS_SELECTOR, f'tr[data-sink="{sink["sink"]}"]')
            assert _text(row, '[data-field="published"]') == (
                "published" if sink["published"] else "UNPUBLISHED")
            assert _text(row, '[data-field="rows"]') == _shown(sink["rows"])
            backlog = row.find_element(By.CSS_SELECTOR, '[data-field="backlog"]')
            # status's "not published" is the head version in the backlog
            assert (str(entry["version"]) in backlog.get_attribute("data-versions").split(",")) \
                == (not sink["published"])
        figures = section.find_elements(By.CSS_SELECTOR, "figure[data-chart]")
        charts = {f.get_attribute("data-chart"): f for f in figures}
        assert {"changes", "durations"} <= set(charts)
        for chart in figures:  # every chart drawn: an svg with marks of a size on screen
            marks = chart.find_elements(By.CSS_SELECTOR, "svg rect")
            assert marks and all(m.size["width"] > 0 and m.size["height"] > 0 for m in marks)
        # every version as its commit record in the log says (read as JSON, not by diffcdc)
        shown_versions = [[c.get_attribute("textContent").strip() for c in row.find_elements(
            By.TAG_NAME, "td")[:7]] for row in section.find_elements(
            By.CSS_SELECTOR, "table.versions tbody tr")]
        assert shown_versions == [[str(c["version"]), c["snapshot_id"], c["committed_at"],
                                   *(str(c["counts"][k]) for k in ("inserted", "updated",
                                                                   "deleted", "rows"))]
                                  for c in reversed(_commits(tmp_path, name))]
        assert int(shown_versions[0][0]) == entry["version"]
        row = overview[name]
        assert row.find_elements(By.TAG_NAME, "td")[1].text == _shown(entry["version"])

    orders = browser.find_element(By.CSS_SELECTOR, 'section[data-table="Orders"]')
    assert entries["Orders"]["unpublished"] and entries["Orders"]["last_run"]["outcome"] == "failed"
    delta = orders.find_element(By.CSS_SELECTOR, 'tr[data-sink="delta"]')
    assert delta.find_element(By.CSS_SELECTOR, '[data-field="backlog"]').get_attribute(
        "data-versions") == "4"
    assert _text(delta, '[data-field="published_version"]') == "3"
    expected = _changelog_columns(str(tmp_path / "lake" / "orders_changes"))
    assert expected  # updates changed columns in versions 2 and 3
    shown = {r.find_elements(By.TAG_NAME, "td")[0].text: int(r.find_elements(
        By.TAG_NAME, "td")[1].text) for r in orders.find_elements(
        By.CSS_SELECTOR, 'table.columns[data-sink="delta"] tbody tr')}
    assert shown == dict(expected)
    assert orders.find_elements(By.CSS_SELECTOR, 'figure[data-chart="columns:delta"] svg rect')

    customers = browser.find_element(By.CSS_SELECTOR, 'section[data-table="Customers"]')
    refused = [r for r in _reports(tmp_path, "Customers") if (r.get("error") or {}).get(
        "exit_code") == 3]
    assert len(refused) == 1
    failure = customers.find_element(
        By.CSS_SELECTOR, f'table.failures tr[data-run-id="{refused[0]["run_id"]}"]')
    assert _text(failure, '[data-field="error"]') == refused[0]["error"]["message"]
    assert _text(failure, '[data-field="hint"]') == refused[0]["error"]["hint"]
    assert "--override-check Customers:delete_ratio" in refused[0]["error"]["hint"]
    gate_rows = customers.find_elements(By.CSS_SELECTOR, "table.gate tbody tr")
    assert any("delete_ratio" in r.find_elements(By.TAG_NAME, "td")[3].text and "overridden"
               in r.text for r in gate_rows)
    assert any("delete_ratio refused" in r.text for r in gate_rows)


def _commits(base, table: str) -> list[dict]:
    """The table's commit records, read straight from its log (oldest first)."""
    folder = base / "state" / table / "log"
    return [json.loads((folder / n).read_text()) for n in sorted(os.listdir(folder))
            if n.endswith(".json") and n.count(".") == 1]


def _reports(base, table: str) -> list[dict]:
    """The table's run reports, read straight from its state folder."""
    folder = base / "state" / table / "reports"
    return [json.loads((folder / n).read_text()) for n in sorted(os.listdir(folder))]


@pytest.mark.slow
def test_a_report_refused_before_anything_is_read_is_one_line_exit_2(tmp_path, capsys,
                                                                      cli_logging, monkeypatch):
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "history_487cccd", "state"),
                    tmp_path / "state")
    state = ["--state", str(tmp_path / "state")]
    cases = [
        (["--output", str(tmp_path / "no" / "such" / "r.html")], "the folder", "create the folder"),
        (["--output", str(tmp_path)], "is a folder", "give a file name"),
        (["--output", str(tmp_path / "r.html"), "--table", "B"], "--table B is not a table",
         "check --table"),
        (["--output", str(tmp_path / "r.html"), "--last", "0"], "--last 0", "--last 60"),
    ]
    for extra, says, hint in cases:
        assert main(["report", *state, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("diffcdc: error: "), err
        assert says in err and hint in err, err
    assert not (tmp_path / "r.html").exists()
    # inside a folder diffcdc reads or writes: never written there
    shutil.copytree(os.path.join(os.path.dirname(__file__), "data", "history_487cccd", "src"),
                    tmp_path / "src")
    config = tmp_path / "diffcdc.toml"
    config.write_text('[diffcdc]\nstate = "state"\n[tables.A]\nsource = "src/A"\n'
                      'keys = ["id"]\n[[tables.A.sinks]]\ntype = "delta"\npath = "lake/a"\n')
    for inside, what in (("state/r.html", "the state root"),
                         ("src/A/r.html", "the source folder of table A"),
                         ("lake/a/r.html", "the target of sink delta of table A")):
        os.makedirs(os.path.dirname(tmp_path / inside), exist_ok=True)
        assert main(["report", "--config", str(config), "--output", str(tmp_path / inside)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"lies inside {what}" in err, err
        assert "write the report outside it" in err and not (tmp_path / inside).exists()
    assert main(["report", "--state", str(tmp_path / "nothing"), "--output",
                 str(tmp_path / "r.html")]) == 2
    assert "the state root" in capsys.readouterr().err
    with monkeypatch.context() as patch:  # jinja2 not installed
        from diffcdc import extras

        patch.setattr(extras, "missing", lambda extra: extra.modules[0])
        assert main(["report", *state, "--output", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("diffcdc: error: diffcdc report needs the jinja2 library (not installed) — "
                   "pip install 'diffcdc[report]'"), err
