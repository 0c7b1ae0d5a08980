"""Issue 43 items 1 and 2: a real ``diffcdc run`` (a subprocess) sends its OpenLineage events
to a real HTTP receiver on 127.0.0.1 and writes its Prometheus metrics file; every event is
valid against the OpenLineage JSON schemas (vendored, tests/data/openlineage/), the metrics
file parses with prometheus-client's own parser and holds ``status --json``'s numbers, and a
receiver, gateway or file that fails changes nothing of the run but one warning line."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffcdc.observe.naming import DatasetName, folder_dataset, jdbc_dataset, kafka_dataset
from tests.support.cli_runs import rows, write
from tests.support.http_receiver import closed_port_url
from tests.support.openlineage_schema import ROOT, validate_event


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "OPENLINEAGE", "DIFFCDC_CRASH_AT"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _diffcdc(cwd, *args: str, env: dict[str, str] | None = None, timeout: float = 600
             ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diffcdc.cli", *args], cwd=cwd,
                          env=env or _env(), capture_output=True, text=True, timeout=timeout,
                          check=False)


def _metrics(path) -> dict[tuple[str, frozenset], float]:
    """The metrics file, parsed back by prometheus-client: (name, labels) → value."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _config(base, extra: str = "") -> str:
    """Two tables: A with two snapshots, B whose snapshot repeats a key (the gate refuses it)."""
    write(str(base / "src_a" / "0001.parquet"), rows(5))
    write(str(base / "src_a" / "0002.parquet"), rows(6, changed=2))
    write(str(base / "src_b" / "0001.parquet"), rows(3) + rows(1))
    path = base / "diffcdc.toml"
    path.write_text(f"""
[diffcdc]
state = "state"
landing = "landing"

[tables.A]
source = "src_a"
keys = ["id"]

[tables.B]
source = "src_b"
keys = ["id"]
{extra}""")
    return str(path)


@pytest.fixture(scope="module")
def config_run(tmp_path_factory):
    """One run of the two-table config with lineage (the client's own OPENLINEAGE_URL), the
    metrics file and a Pushgateway; then ``status --json``."""
    from tests.support.http_receiver import start_receiver

    base = tmp_path_factory.mktemp("observe")
    receiver, server = start_receiver()
    try:
        config = _config(base, f"""
[metrics]
file = "metrics/diffcdc.prom"
pushgateway = "{receiver.url}"
""")
        os.makedirs(base / "metrics")
        done = _diffcdc(base, "run", "--config", config,
                        env=_env(OPENLINEAGE_URL=receiver.url, OPENLINEAGE_NAMESPACE="nightly"))
        status = _diffcdc(base, "status", "--config", config, "--json")
    finally:
        server.shutdown()
        server.server_close()
    return base, done, json.loads(status.stdout), receiver


@pytest.mark.slow
@pytest.mark.integration
def test_each_version_is_a_started_and_completed_run_and_a_refused_table_a_failed_one(config_run):
    base, done, _, receiver = config_run
    assert done.returncode == 3, done.stderr  # B refused by the gate
    events = receiver.lineage_events()
    for event in events:
        validate_event(event)
    by_job = defaultdict(list)
    for event in events:
        assert event["job"]["namespace"] == "nightly"
        by_job[event["job"]["name"]].append(event)
    a, b = by_job.pop("A"), by_job.pop("B")
    assert not by_job
    assert [e["eventType"] for e in a] == ["START", "COMPLETE", "START", "COMPLETE"]
    assert a[0]["run"]["runId"] == a[1]["run"]["runId"] != a[2]["run"]["runId"] == \
        a[3]["run"]["runId"]
    source = {"namespace": "file", "name": str((base / "src_a").resolve())}
    landing = {"namespace": "file", "name": str((base / "landing" / "A").resolve())}
    for event in a:
        assert [{k: d[k] for k in ("namespace", "name")} for d in event["inputs"]] == [source]
        assert [{k: d[k] for k in ("namespace", "name")} for d in event["outputs"]] == [landing]
    first, second = a[1], a[3]
    assert first["run"]["facets"]["diffcdc"]["snapshotId"] == "0001.parquet"
    assert second["run"]["facets"]["diffcdc"]["version"] == 2
    assert second["run"]["facets"]["diffcdc"]["exitClass"] == "ok"
    out = second["outputs"][0]
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 3  # +1 ~2 -0
    changes = out["outputFacets"]["diffcdc"]
    assert (changes["inserted"], changes["updated"], changes["deleted"]) == (1, 2, 0)
    assert first["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 5
    assert [f["name"] for f in out["facets"]["schema"]["fields"]] == ["id", "v"]
    checks = second["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert {c["assertion"] for c in checks} >= {"keys_unique", "keys_not_null"}
    assert all(c["success"] for c in checks)
    assert [e["eventType"] for e in b] == ["START", "FAIL"]
    assert b[0]["run"]["runId"] == b[1]["run"]["runId"]
    fail = b[1]
    assert fail["run"]["facets"]["diffcdc"]["exitClass"] == "refused"
    assert fail["run"]["facets"]["diffcdc"]["snapshotId"] == "0001.parquet"
    assert "keys" in fail["run"]["facets"]["errorMessage"]["message"]
    refused = {c["assertion"]: c for c in
               fail["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]}
    assert refused["keys_unique"]["success"] is False


@pytest.mark.slow
@pytest.mark.integration
def test_the_metrics_file_holds_the_numbers_status_shows_and_the_gateway_gets_them(config_run):
    base, done, status, receiver = config_run
    metrics = _metrics(base / "metrics" / "diffcdc.prom")

    def value(name: str, **labels: str) -> float | None:
        return metrics.get((name, frozenset(labels.items())))

    tables = {t["table"]: t for t in status["tables"]}
    a, b = tables["A"], tables["B"]
    last = a["last_run"]
    assert value("diffcdc_table_version", table="A") == a["version"] == 2
    assert value("diffcdc_table_rows", table="A") == a["rows"] == 6
    assert value("diffcdc_table_last_run_inserted_rows", table="A") == last["inserted"] == 6
    assert value("diffcdc_table_last_run_updated_rows", table="A") == last["updated"] == 2
    assert value("diffcdc_table_last_run_deleted_rows", table="A") == last["deleted"] == 0
    assert value("diffcdc_table_last_run_duration_seconds", table="A") == last["seconds"]
    assert value("diffcdc_table_last_commit_timestamp_seconds", table="A") == \
        pytest.approx(_epoch(a["committed_at"]))
    assert value("diffcdc_table_last_success_timestamp_seconds", table="A") == \
        pytest.approx(_epoch(last["started_at"]) + last["seconds"])
    assert value("diffcdc_table_snapshots_pending", table="A") == len(a["waiting"]) == 0
    assert value("diffcdc_table_snapshots_pending", table="B") == len(b["waiting"]) == 1
    (sink,) = a["sinks"]
    assert value("diffcdc_sink_backlog_versions", table="A", sink=sink["sink"],
                 type=sink["type"]) == sink["backlog"] == 0
    assert value("diffcdc_table_last_run_exit_code", table="A", exit_class="ok") == 0
    assert value("diffcdc_table_last_run_exit_code", table="B", exit_class="refused") == 3
    assert value("diffcdc_run_exit_code", exit_class="refused") == 3
    assert b["version"] is None and value("diffcdc_table_version", table="B") is None
    assert value("diffcdc_table_last_success_timestamp_seconds", table="B") is None
    pushed = [r for r in receiver.requests if r.path == "/metrics/job/diffcdc"]
    assert [r.method for r in pushed] == ["PUT"]
    assert pushed[0].body == (base / "metrics" / "diffcdc.prom").read_bytes()


def _untimed(summary: str) -> str:
    """The end-of-run summary without its times."""
    return re.sub(r"\d+\.\d s", "S s", re.sub(r" +\d+\.\d$", " S", summary, flags=re.M))


def _messages(stderr: str) -> list[str]:
    """The lines of stderr without their timestamps."""
    return [line.split(" ", 1)[-1] for line in stderr.splitlines()]


def _hung_receiver():
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", lambda: (
        stop.set(), [c.close() for c in held], listener.close())


def _refused_before_spark(base, extra: str = "") -> str:
    """A one-table config whose source folder is missing: refused before Spark (exit 2)."""
    path = base / "diffcdc.toml"
    path.write_text(f"""
[diffcdc]
state = "state"
landing = "landing"

[tables.T]
source = "missing"
keys = ["id"]
{extra}""")
    return str(path)


@pytest.mark.default_tier
@pytest.mark.slow
@pytest.mark.integration
def test_a_table_refused_before_spark_is_a_failed_run_and_its_exit_class_a_metric(
        tmp_path, http_receiver):
    config = _refused_before_spark(tmp_path, f"""
[lineage]
url = "{http_receiver.url}"
namespace = "etl"
""")
    metrics = tmp_path / "m.prom"
    done = _diffcdc(tmp_path, "run", "--config", config, "--metrics-file", str(metrics))
    assert done.returncode == 2, done.stderr
    events = http_receiver.lineage_events()
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    for event in events:
        validate_event(event)
        assert (event["job"]["namespace"], event["job"]["name"]) == ("etl", "T")
    assert "does not exist" in events[1]["run"]["facets"]["errorMessage"]["message"]
    assert events[1]["run"]["facets"]["diffcdc"]["exitClass"] == "usage"
    assert _metrics(metrics)[("diffcdc_run_exit_code", frozenset({("exit_class", "usage")}))] \
        == 2


@pytest.mark.slow
@pytest.mark.integration
def test_a_receiver_or_gateway_down_or_hung_and_an_unwritable_file_are_one_warning_each(tmp_path):
    plain = _diffcdc(tmp_path, "run", "--config", _refused_before_spark(tmp_path))
    assert plain.returncode == 2
    (tmp_path / "file").write_text("")
    unwritable = str(tmp_path / "file" / "m.prom")  # its folder is a file (also as root)
    hung_url, stop = _hung_receiver()
    try:
        for url in (closed_port_url(), hung_url):
            config = _refused_before_spark(tmp_path, f'[lineage]\nurl = "{url}"\ntimeout = 1\n'
                                           f'[metrics]\npushgateway = "{url}"\ntimeout = 1\n')
            started = time.monotonic()
            done = _diffcdc(tmp_path, "run", "--config", config, "--metrics-file", unwritable,
                            timeout=60)
            assert time.monotonic() - started < 30
            assert (done.returncode, _untimed(done.stdout)) == (plain.returncode,
                                                                _untimed(plain.stdout))
            extra = [line for line in _messages(done.stderr) if line not in
                     _messages(plain.stderr)]
            assert len(extra) == 3, done.stderr
            assert "OpenLineage events" in extra[0] and url in extra[0], extra
            assert "the metrics file" in extra[1] and unwritable in extra[1], extra
            assert "Pushgateway" in extra[2] and url in extra[2], extra
    finally:
        stop()


def test_datasets_are_named_per_the_openlineage_naming_conventions(tmp_path):
    assert jdbc_dataset("jdbc:postgresql://db.example:5433/erp", "sales.orders") == \
        DatasetName("postgres://db.example:5433", "erp.sales.orders")
    pg = jdbc_dataset("jdbc:postgresql://db/erp", "orders")
    assert (pg.namespace, pg.name) == ("postgres://db:5432", "erp.public.orders")
    my = jdbc_dataset("jdbc:mysql://m.example/shop", "orders")
    assert (my.namespace, my.name) == ("mysql://m.example:3306", "shop.orders")
    topic = kafka_dataset(["b2:9093", "b1:9092"], "diffcdc.T")
    assert (topic.namespace, topic.name) == ("kafka://b1:9092", "diffcdc.T")
    adls = folder_dataset("abfss://lake@acct.dfs.core.windows.net/landing/T")
    assert (adls.namespace, adls.name) == ("abfss://lake@acct.dfs.core.windows.net",
                                          "/landing/T")
    local = folder_dataset(str(tmp_path / "x" / ".." / "landing"))
    assert (local.namespace, local.name) == ("file", str((tmp_path / "landing").resolve()))


def test_a_sink_that_cannot_publish_is_its_backlog_and_a_failed_run(spark, tmp_path, monkeypatch,
                                                                    http_receiver):
    """A version committed and published to one sink of two: its COMPLETE says which sink got
    it, the table's failure is a run of its own, and the metrics show the other's backlog."""
    from diffcdc.cli import main
    from diffcdc.errors import StorageError
    from diffcdc.sinks.openmirroring.sink import OpenMirroringSink

    for sid, tag in (("1.parquet", "a"), ("2.parquet", "b")):
        write(str(tmp_path / "source" / sid), [{"id": i, "v": f"{tag}{i}"} for i in range(3)])
    config = tmp_path / "diffcdc.toml"
    config.write_text(f"""
[diffcdc]
state = "state"

[lineage]
url = "{http_receiver.url}"

[tables.T]
source = "source"
keys = ["id"]

[[tables.T.sinks]]
type = "open_mirroring"
name = "fabric"
landing = "landing-a"

[[tables.T.sinks]]
type = "open_mirroring"
name = "archive"
landing = "landing-b"
""")
    real = OpenMirroringSink.publish

    def failing(self, version, manifest, staging_dir, history, **kwargs):
        if self.id == "archive" and version == 2:
            raise StorageError("the archive share is offline", hint="bring it back")
        return real(self, version, manifest, staging_dir, history, **kwargs)

    monkeypatch.setattr(OpenMirroringSink, "publish", failing)
    metrics = tmp_path / "m.prom"
    assert main(["run", "--config", str(config), "--quiet", "--metrics-file", str(metrics)]) == 1
    events = http_receiver.lineage_events()
    for event in events:
        validate_event(event)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "COMPLETE",
                                                "START", "FAIL"]
    outputs = {o["name"].rsplit("/", 2)[-2]: o["outputFacets"] for o in events[3]["outputs"]}
    assert outputs["landing-a"]["diffcdc"]["published"] is True
    assert outputs["landing-a"]["outputStatistics"]["rowCount"] == 3
    assert outputs["landing-b"]["diffcdc"]["published"] is False
    assert "outputStatistics" not in outputs["landing-b"]
    fail = events[5]["run"]["facets"]
    assert "archive share is offline" in fail["errorMessage"]["message"]
    assert fail["diffcdc"]["exitClass"] == "failed"
    found = _metrics(metrics)
    backlog = {dict(labels)["sink"]: v for (name, labels), v in found.items()
               if name == "diffcdc_sink_backlog_versions"}
    assert backlog == {"fabric": 0, "archive": 1}
    assert found[("diffcdc_table_last_run_exit_code",
                  frozenset({("table", "T"), ("exit_class", "failed")}))] == 1


@pytest.mark.slow
def test_an_unreadable_openlineage_yml_is_one_warning_and_no_events(tmp_path):
    """The client's own configuration file broken: the client would log a traceback and fall
    back to printing events nowhere; diffcdc says so in one line and sends nothing."""
    config = _refused_before_spark(tmp_path)
    plain = _diffcdc(tmp_path, "run", "--config", config)
    (tmp_path / "openlineage.yml").write_text("transport: [broken\n")
    done = _diffcdc(tmp_path, "run", "--config", config)
    assert (done.returncode, _untimed(done.stdout)) == (plain.returncode, _untimed(plain.stdout))
    extra = [line for line in _messages(done.stderr) if line not in _messages(plain.stderr)]
    assert len(extra) == 1 and "OpenLineage events are not sent" in extra[0], done.stderr
    assert "openlineage.yml" in extra[0]


class _Recorder:
    """An emitter that keeps the events (as the receiver would get them) and its closes."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.closed = 0

    def emit(self, event) -> None:
        from openlineage.client.serde import Serde

        self.events.append(json.loads(Serde.to_json(event)))

    def close(self) -> None:
        self.closed += 1


def test_runs_still_open_when_the_run_stops_are_aborted_and_a_failed_table_is_a_run(tmp_path):
    from diffcdc.config_file import load_config
    from diffcdc.engine.report import TableReport
    from diffcdc.observe.hook import LineageObserver

    (tmp_path / "src").mkdir()
    config = load_config(_config_with_source(tmp_path))
    recorder = _Recorder()
    observer = LineageObserver(config, recorder, "etl")
    observer.begin("T", "0001.parquet")
    observer.begin("T", "0001.parquet")  # the snapshot's next stage: the same run
    observer.abort()
    assert [e["eventType"] for e in recorder.events] == ["START", "ABORT"]
    assert recorder.events[0]["run"]["runId"] == recorder.events[1]["run"]["runId"]
    assert recorder.closed == 1
    report = TableReport("T", "r1", "2026-01-01T00:00:00+00:00", outcome="failed",
                         error={"message": "table T: boom", "exit_code": 1})
    observer.ended(report)
    observer.ended(report)  # told twice (the engine, then the command): one run
    observer.abort()  # nothing open: nothing sent, nothing waited for
    assert [e["eventType"] for e in recorder.events] == ["START", "ABORT", "START", "FAIL"]
    assert recorder.closed == 1
    for event in recorder.events:
        validate_event(event)
        assert event["inputs"][0]["name"] == str((tmp_path / "src").resolve())
    assert recorder.events[3]["run"]["facets"]["diffcdc"]["exitClass"] == "failed"
    # a snapshot read that made no version (the last committed one again), then the next
    # snapshot, then the table's end: each run has its end
    observer = LineageObserver(config, recorder, "etl")  # the next night's run
    observer.begin("U", "a")  # no such table of the config: nothing
    observer.begin("T", "0002.parquet")
    observer.begin("T", "0003.parquet")
    observer.ended(TableReport("T", "r2", "2026-01-02T00:00:00+00:00"))
    kinds = [(e["eventType"], e["run"]["facets"]["diffcdc"].get("snapshotId"))
             for e in recorder.events[4:]]
    assert kinds == [("START", "0002.parquet"), ("COMPLETE", "0002.parquet"),
                     ("START", "0003.parquet"), ("COMPLETE", "0003.parquet")]
    for event in recorder.events[4:]:
        validate_event(event)


def _config_with_source(base) -> str:
    path = base / "diffcdc.toml"
    path.write_text('[diffcdc]\nstate = "state"\nlanding = "landing"\n\n'
                    '[tables.T]\nsource = "src"\nkeys = ["id"]\n')
    return str(path)
