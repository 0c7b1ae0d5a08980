"""Issue 43 attacked: lineage dataset names and the metrics file against what a hostile
operator configures (multi-host and non-PostgreSQL JDBC URLs, quoted identifiers, IPv6, OneLake
and HDFS folders, Kafka servers written with a protocol or resolved by DNS, credentials in
URLs) — each case fails on the code before its fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffcdc.observe.naming import DatasetName, folder_dataset, jdbc_dataset, kafka_dataset
from diffcdc.observe.run_facts import epoch

DATA = os.path.join(os.path.dirname(__file__), "data")

SECRETS = ("tiger", "pw", "SECRET", "scott")


@pytest.mark.unit
@pytest.mark.parametrize(("url", "table", "expected"), [
    # pgjdbc's failover list: the first host names it (was: ValueError, every event lost)
    ("jdbc:postgresql://h1:5433,h2:5434/erp", "s.t", ("postgres://h1:5433", "erp.s.t")),
    ("jdbc:postgresql://[::1]:5433/erp", "s.t", ("postgres://[::1]:5433", "erp.s.t")),
    # SQL text as Spark's dbtable takes it: quoted parts whole, unquoted folded by PostgreSQL
    ("jdbc:postgresql://db/erp", '"weird.schema"."tab.le"', ("postgres://db:5432",
                                                           "erp.weird.schema.tab.le")),
    ("jdbc:postgresql://db/erp", ' "A""b" . c ', ("postgres://db:5432", 'erp.A"b.c')),
    ("jdbc:postgresql://DB.Example/Erp", "Sales.Orders", ("postgres://db.example:5432",
                                                         "Erp.sales.orders")),
    ("jdbc:mysql://db/shop", "`we.ird`.`Or``ders`", ("mysql://db:3306", "we.ird.Or`ders")),
    ("jdbc:postgresql:erp?user=x", "t", ("postgres://localhost:5432", "erp.public.t")),
    # other databases: never an exception, never the URL's parameters in the name
    ("jdbc:sqlserver://host:1433;databaseName=db;user=scott", "dbo.t",
     ("sqlserver://host:1433", "db.dbo.t")),
    ("jdbc:oracle:thin:scott/tiger@//host:1521/svc", "s.t", ("oracle://host:1521", "svc.s.t")),
])
def test_jdbc_urls_an_operator_writes_are_named_per_the_spec(url, table, expected):
    named = jdbc_dataset(url, table)
    assert (named.namespace, named.name) == expected
    assert not any(s in named.namespace + named.name for s in SECRETS)


@pytest.mark.unit
@pytest.mark.parametrize(("path", "expected"), [
    # OneLake is not renamed to a host that does not exist (was: onelake.dfs.core.windows.net)
    ("abfss://ws@onelake.dfs.fabric.microsoft.com/lh.Lakehouse/Files/T",
     ("abfss://ws@onelake.dfs.fabric.microsoft.com", "/lh.Lakehouse/Files/T")),
    ("https://acct.dfs.core.windows.net/cont/landing?sv=2022&sig=SECRET",
     ("abfss://cont@acct.dfs.core.windows.net", "/landing")),
    # was: file://webhdfs://nn:9870, with the URL's user:password before it was stripped
    ("webhdfs://scott:tiger@nn:9870/lake/T", ("webhdfs://nn:9870", "/lake/T")),
    ("hdfs://nn/lake/T", ("hdfs://nn:8020", "/lake/T")),
    ("s3a://bucket/lake/T", ("s3://bucket", "/lake/T")),
])
def test_remote_folders_are_named_by_their_store_and_never_carry_credentials(path, expected):
    named = folder_dataset(path)
    assert (named.namespace, named.name) == expected
    assert not any(s in named.namespace + named.name for s in SECRETS)


@pytest.mark.unit
@pytest.mark.parametrize(("servers", "namespace"), [
    (["PLAINTEXT://b1:9092"], "kafka://b1:9092"),  # was kafka://PLAINTEXT://b1:9092
    (["SASL_SSL://scott:pw@b1:9093"], "kafka://b1:9093"),
    (["b1"], "kafka://b1:9092"),  # was: ValueError (an empty port)
    (["::1"], "kafka://[::1]:9092"),
])
def test_kafka_servers_as_an_operator_writes_them_name_the_cluster(servers, namespace):
    assert kafka_dataset(servers, "T") == DatasetName(namespace, "T")


@pytest.mark.unit
def test_a_kafka_sink_is_named_by_its_configured_broker_not_the_address_it_resolves_to():
    from diffcdc.sinks.kafka.config import KafkaSinkConfig
    from diffcdc.sinks.kafka.plugin import KafkaPlugin
    from diffcdc.sinks.table import SinkTable

    config = KafkaSinkConfig(type="kafka", bootstrap_servers="localhost:9092,B2.example:9093",
                             topic="diffcdc.T")
    named = KafkaPlugin.lineage_dataset(config, SinkTable("T", ("id",)))
    assert named == DatasetName("kafka://b2.example:9093", "diffcdc.T")  # was 127.0.0.1:9092


def _diffcdc(cwd, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "OPENLINEAGE"))}
    return subprocess.run([sys.executable, "-m", "diffcdc.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _samples(path) -> dict[tuple[str, frozenset], float]:
    with open(path, encoding="utf-8") as handle:
        return {(s.name, frozenset(s.labels.items())): s.value
                for f in text_string_to_metric_families(handle.read()) for s in f.samples}


@pytest.mark.slow
@pytest.mark.integration
def test_a_run_of_a_subset_keeps_every_table_of_the_config_in_the_metrics_file(tmp_path):
    """``--only B`` then ``--only C``: A (a committed table not run) keeps the figures status
    shows, B (refused in the run before) keeps its exit code; before the fix the file held C
    only, so a "not refreshed" or "run failed" alert on A or B stopped watching it."""
    base = tmp_path / "root"
    shutil.copytree(os.path.join(DATA, "state_main487"), base)
    os.makedirs(base / "src" / "C")
    (base / "c.toml").write_text("""
[diffcdc]
state = "state"
landing = "landing"

[tables.A]
source = "src/A"
keys = ["id"]

[tables.B]
source = "missing"
keys = ["id"]

[tables.C]
source = "src/C"
keys = ["id"]
""")
    metrics = str(base / "m.prom")
    refused = _diffcdc(base, "run", "--config", "c.toml", "--only", "B", "--metrics-file", metrics)
    assert refused.returncode == 2, refused.stderr
    done = _diffcdc(base, "run", "--config", "c.toml", "--only", "C", "--metrics-file", metrics)
    assert done.returncode == 0, done.stderr
    found = _samples(metrics)
    status = {t["table"]: t for t in json.loads(
        _diffcdc(base, "status", "--config", "c.toml", "--json").stdout)["tables"]}
    a = status["A"]

    def value(name: str, **labels: str) -> float | None:
        return found.get((name, frozenset(labels.items())))

    assert value("diffcdc_table_version", table="A") == a["version"] == 2
    assert value("diffcdc_table_rows", table="A") == a["rows"]
    assert value("diffcdc_table_last_commit_timestamp_seconds", table="A") == \
        pytest.approx(epoch(a["committed_at"]))
    assert value("diffcdc_table_last_success_timestamp_seconds", table="A") == pytest.approx(
        epoch(a["last_run"]["started_at"]) + a["last_run"]["seconds"])
    assert value("diffcdc_sink_backlog_versions", table="A", sink="open_mirroring",
                 type="open_mirroring") == 0
    assert value("diffcdc_table_last_run_exit_code", table="B", exit_class="usage") == 2
    assert value("diffcdc_table_last_run_exit_code", table="C", exit_class="ok") == 0
    assert value("diffcdc_run_exit_code", exit_class="ok") == 0


ALL_KINDS = """
[diffcdc]
state = "state"
landing = "abfss://landing@acct.dfs.core.windows.net/mirror/LandingZone"

[defaults]
landing_options = { account_key_env = "OA_LANDING_KEY" }

[tables.Pg]
keys = ["id"]
[tables.Pg.source]
type = "jdbc"
url = "jdbc:postgresql://db1:5433,db2:5433/erp?user=reader&ssl=true"
table = 'Sales."Order Lines"'
user = "reader"
password_env = "OA_PG_PASSWORD"

[[tables.Pg.sinks]]
type = "kafka"
bootstrap_servers = "SASL_SSL://localhost:9093"
topic = "erp.orders"
security_protocol = "sasl_ssl"
sasl_mechanism = "PLAIN"
sasl_username = "writer"
sasl_password_env = "OA_KAFKA_PASSWORD"

[tables.My]
keys = ["id"]
[tables.My.source]
type = "jdbc"
url = "jdbc:mysql://maria.example/shop"
table = "`order items`"
password_env = "OA_PG_PASSWORD"

[[tables.My.sinks]]
type = "delta"
path = "lake/my"
changelog_path = "lake/my_changes"

[[tables.My.sinks]]
type = "delta"
mode = "scd2"
name = "history"
path = "lake/my_history"

[tables.Txt]
source = "src"
keys = ["id"]
file_format = "tsv"
"""


@pytest.mark.unit
def test_every_source_and_sink_kind_makes_valid_events_without_a_secret(tmp_path, monkeypatch):
    """Each table's START, COMPLETE (a version with a gate's checks) and FAIL, as the receiver
    gets them, valid against the spec and the facets' schemas; the passwords and the landing key
    (set in the environment) appear nowhere, and every dataset is named per the spec."""
    from datetime import datetime, timezone

    from openlineage.client.serde import Serde

    from diffcdc.config_file import load_config
    from diffcdc.core.quality_report import CheckResult, GateReport
    from diffcdc.observe.lineage import (
        LineageJob,
        complete_event,
        fail_event,
        new_run_id,
        start_event,
    )
    from diffcdc.observe.run_facts import SinkOutput, TableFacts, VersionFacts
    from tests.support.openlineage_schema import validate_event

    secrets = {"OA_PG_PASSWORD": "pg-s3cret", "OA_KAFKA_PASSWORD": "kafka-s3cret",
               "OA_LANDING_KEY": "bGFuZGluZy1rZXk="}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "src").mkdir()
    (tmp_path / "c.toml").write_text(ALL_KINDS)
    monkeypatch.chdir(tmp_path)
    config = load_config(str(tmp_path / "c.toml"))
    gate = GateReport("snapshot", (CheckResult("keys_unique", True, True, observed=0,
                                               threshold=0, detail='a "quoted" <detail>'),))
    at = datetime(2026, 3, 29, 1, 30, tzinfo=timezone.utc)  # a DST change in Europe
    names = {}
    for table in config.tables:
        job = LineageJob.of(table, "etl")
        run_id = new_run_id()
        version = VersionFacts("0001.parquet", 1, 3, 3, 0, 0, 1.0, tuple(
            SinkOutput(s.sink, s.type, 3, True) for s in job.sinks), (gate,))
        facts = TableFacts(table.name, "r1", "failed", 3, 1.0, (), (gate,), "table: refused",
                           "0001.parquet", "0")
        events = [start_event(job, run_id, at, "0001.parquet"),
                  complete_event(job, run_id, at, version, {"type": "struct", "fields": [
                      {"name": "id", "type": "long"}, {"name": "s", "type": {
                          "type": "struct", "fields": [{"name": "a b", "type": "string"}]}}]}),
                  fail_event(job, new_run_id(), at, facts, "0001.parquet")]
        for event in events:
            text = Serde.to_json(event)
            assert not [v for v in secrets.values() if v in text], text
            document = json.loads(text)
            validate_event(document)
            assert document["eventTime"] == "2026-03-29T01:30:00+00:00"
        names[table.name] = ((job.source.namespace, job.source.name),
                             [(s.dataset.namespace, s.dataset.name) for s in job.sinks])
    lake = str((tmp_path / "lake").resolve())
    landing = ("abfss://landing@acct.dfs.core.windows.net", "/mirror/LandingZone/Txt")
    assert names == {
        "Pg": (("postgres://db1:5433", "erp.sales.Order Lines"),
               [("kafka://localhost:9093", "erp.orders")]),
        "My": (("mysql://maria.example:3306", "shop.order items"),
               [("file", f"{lake}/my"), ("file", f"{lake}/my_history")]),
        "Txt": (("file", str((tmp_path / "src").resolve())), [landing]),
    }


class _Answers:
    """A loopback receiver answering every POST with one status (a redirect's Location: /moved,
    whose GET answers 200), recording the requests."""

    def __init__(self, status: int) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self, code: int) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((self.command, self.path))
                self.send_response(code)
                if 300 <= code < 400:
                    self.send_header("Location", "/moved?sig=SECRET")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                self._answer(status)

            def do_GET(self) -> None:
                self._answer(200)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.unit
@pytest.mark.parametrize("status", [301, 302, 303, 307, 413, 500])
def test_a_receiver_that_redirects_or_refuses_is_one_warning_and_no_lost_success(status, caplog):
    """A redirect used to be followed as a GET (301/302/303): every event dropped with a 200,
    no warning. Now any redirect, like a refusal, is one warning line naming the receiver; the
    events after it are not sent; closing never waits beyond the timeout."""
    import time

    from diffcdc.observe.lineage import LineageEmitter, LineageJob, new_run_id, now, start_event
    from diffcdc.observe.settings import LineageSettings

    receiver = _Answers(status)
    try:
        emitter = LineageEmitter.open(LineageSettings(url=receiver.url, timeout=2))
        assert emitter is not None
        job = LineageJob("etl", "T", DatasetName("file", "/src"), ())
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="diffcdc"):
            for _ in range(3):
                emitter.emit(start_event(job, new_run_id(), now(), "0001.parquet"))
            emitter.close()
        assert time.monotonic() - started < 5
    finally:
        receiver.stop()
    warned = [r.getMessage() for r in caplog.records if r.name == "diffcdc"]
    assert len(warned) == 1 and receiver.url in warned[0], warned
    assert str(status) in warned[0] and "SECRET" not in warned[0], warned
    assert receiver.seen == [("POST", "/api/v1/lineage")]


@pytest.mark.slow
@pytest.mark.integration
def test_a_run_ended_by_an_error_before_its_reports_still_writes_its_metrics(tmp_path):
    """Spark Connect not answering ends the run (exit 2) before any table's report: the metrics
    file used to keep the last run's "ok", so the run-failed alert stayed silent."""
    from tests.support.cli_runs import rows, write

    write(str(tmp_path / "src" / "0001.parquet"), rows(3))
    (tmp_path / "c.toml").write_text('[diffcdc]\nstate = "state"\nlanding = "landing"\n\n'
                                     '[tables.A]\nsource = "src"\nkeys = ["id"]\n')
    metrics = tmp_path / "m.prom"
    metrics.write_text('diffcdc_run_exit_code{exit_class="ok"} 0.0\n')  # last night's
    done = _diffcdc(tmp_path, "run", "--config", "c.toml", "--metrics-file", str(metrics),
                    "--remote", "sc://127.0.0.1:9", "--connect-timeout", "1")
    assert done.returncode == 2, done.stderr
    found = _samples(metrics)
    assert found[("diffcdc_run_exit_code", frozenset({("exit_class", "usage")}))] == 2
    assert found[("diffcdc_table_last_run_exit_code",
                  frozenset({("exit_class", "usage"), ("table", "A")}))] == 2
    assert found[("diffcdc_table_snapshots_pending", frozenset({("table", "A")}))] == 1
    assert ("diffcdc_run_exit_code", frozenset({("exit_class", "ok")})) not in found


@pytest.mark.unit
def test_a_receiver_or_gateway_url_with_credentials_never_shows_them(caplog):
    """``[lineage] url`` with user:password@ (requests sends it as basic auth) and a Pushgateway
    URL alike: the warning lines (stderr, the run's log file) used to print the password,
    twice (the URL and the HTTP error naming it)."""
    from prometheus_client import CollectorRegistry

    from diffcdc.observe.lineage import LineageEmitter, LineageJob, new_run_id, now, start_event
    from diffcdc.observe.metrics import push_metrics
    from diffcdc.observe.settings import LineageSettings

    receiver = _Answers(413)
    url = receiver.url.replace("http://", "http://bob:s3cret@")
    try:
        with caplog.at_level("WARNING", logger="diffcdc"):
            emitter = LineageEmitter.open(LineageSettings(url=url, timeout=2))
            assert emitter is not None
            emitter.emit(start_event(LineageJob("etl", "T", DatasetName("file", "/s"), ()),
                                     new_run_id(), now(), None))
            emitter.close()
            assert not push_metrics(CollectorRegistry(), url, "diffcdc", 2)
    finally:
        receiver.stop()
    warned = [r.getMessage() for r in caplog.records if r.name == "diffcdc"]
    assert len(warned) == 2 and all("127.0.0.1" in w for w in warned), warned
    assert not [w for w in warned if "s3cret" in w or "bob" in w], warned


@pytest.mark.slow
@pytest.mark.integration
def test_a_metrics_file_inside_a_source_the_state_or_a_target_is_refused_before_anything_ran(
        tmp_path):
    """Rewritten every run, a metrics file in the source folder was read as a snapshot (the
    table refused every night after, ``unsupported snapshot file type``); in the state root or
    a landing table folder it was a foreign file. Now: exit 2, one line, nothing written."""
    (tmp_path / "src").mkdir()
    (tmp_path / "c.toml").write_text('[diffcdc]\nstate = "state"\nlanding = "landing"\n\n'
                                     '[tables.A]\nsource = "src"\nkeys = ["id"]\n')
    for inside, what in (("src/m.prom", "the source folder of table A"),
                         ("state/m.prom", "the state root"),
                         ("landing/A/m.prom", "the target of sink open_mirroring of table A")):
        os.makedirs(tmp_path / os.path.dirname(inside), exist_ok=True)
        done = _diffcdc(tmp_path, "run", "--config", "c.toml", "--metrics-file", inside)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert f"--metrics-file {inside} lies inside {what}" in lines[0], lines
        assert not (tmp_path / inside).exists()
    (tmp_path / "c.toml").write_text((tmp_path / "c.toml").read_text()
                                     + '\n[metrics]\nfile = "src/n.prom"\n')
    done = _diffcdc(tmp_path, "run", "--config", "c.toml")
    assert done.returncode == 2 and "[metrics] file" in done.stderr and \
        "the source folder of table A" in done.stderr, done.stderr
    assert not (tmp_path / "src" / "n.prom").exists()


@pytest.mark.unit
def test_ctrl_c_before_the_tables_reports_writes_the_interrupted_exit_code(tmp_path):
    from diffcdc.cli.progress import choose_progress
    from diffcdc.config_file import load_config
    from diffcdc.observe.hook import run_observers

    (tmp_path / "src").mkdir()
    (tmp_path / "c.toml").write_text('[diffcdc]\nstate = "state"\nlanding = "landing"\n\n'
                                     '[tables.A]\nsource = "src"\nkeys = ["id"]\n')
    metrics = tmp_path / "m.prom"
    observers = run_observers(load_config(str(tmp_path / "c.toml")),
                              choose_progress(True, terminal=False), str(metrics))
    observers.close()
    observers.crashed(KeyboardInterrupt(), 2.5)
    found = _samples(metrics)
    assert found[("diffcdc_run_exit_code", frozenset({("exit_class", "interrupted")}))] == 130
    assert found[("diffcdc_table_last_run_exit_code",
                  frozenset({("exit_class", "interrupted"), ("table", "A")}))] == 130
    assert found[("diffcdc_run_duration_seconds", frozenset())] == 2.5


MADE_AT = "/tmp/s4S/fixture_root"  # where tests/data/state_main487 was made


def _fixture_state(base) -> None:
    """tests/data/state_main487 (table A, two versions) at ``base``, its records' paths there."""
    shutil.copytree(os.path.join(DATA, "state_main487"), base)
    for folder, _, files in os.walk(base / "state"):
        for name in files:
            if name.endswith(".json"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text.replace(MADE_AT, str(base)))


@pytest.mark.slow
@pytest.mark.integration
def test_a_failed_run_after_a_quiet_night_keeps_that_nights_success(tmp_path):
    """State keeps only the last run and the last change: after a run with nothing to do, a
    failed one left the metric at the older change's end, a day too old (a false "no success"
    alert). The file written after the quiet night knows better and is kept."""
    base = tmp_path / "root"
    _fixture_state(base)
    config = base / "c.toml"
    text = '[diffcdc]\nstate = "state"\nlanding = "landing"\n\n[tables.A]\nsource = "{}"\n' \
        'keys = ["id"]\n'
    config.write_text(text.format("src/A"))
    metrics = str(base / "m.prom")
    quiet = _diffcdc(base, "run", "--config", "c.toml", "--metrics-file", metrics)
    assert quiet.returncode == 0, quiet.stderr
    success = _samples(metrics)[("diffcdc_table_last_success_timestamp_seconds",
                                 frozenset({("table", "A")}))]
    config.write_text(text.format("missing"))
    failed = _diffcdc(base, "run", "--config", "c.toml", "--metrics-file", metrics)
    assert failed.returncode == 2, failed.stderr
    status = json.loads(_diffcdc(base, "status", "--config", "c.toml", "--json").stdout)
    entry = status["tables"][0]
    assert entry["last_run"]["outcome"] == "failed"
    change_end = epoch(entry["last_change"]["started_at"]) + entry["last_change"]["seconds"]
    assert change_end < success - 3600  # the fixture's change: made long before this test
    found = _samples(metrics)
    assert found[("diffcdc_table_last_success_timestamp_seconds",
                  frozenset({("table", "A")}))] == success
    assert found[("diffcdc_table_last_run_exit_code",
                  frozenset({("table", "A"), ("exit_class", "usage")}))] == 2
