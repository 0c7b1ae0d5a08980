"""The engine, the CLI and the reference replay against a remote landing root.

The landing root is the loopback DFS server of :mod:`tests.support.dfs_server`, reached through the
real ``azure-storage-file-datalake`` SDK (``AdlsStore``): the property/replay test, a crash in
the middle of a remote publish (a real ``diffcdc run`` process) and its resume, an aborted
publish finished by the next run, foreign files that are never overwritten, faults (503, 429,
dropped connections, slow answers, lost answers) during a run, listing of the cleanup folders
with paging, ``status``/``verify`` remotely, and no secret anywhere in state, reports or output.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from azure.storage.filedatalake import ResourceTypes, generate_account_sas
from hypothesis import HealthCheck, given, settings

from diffcdc.cli.main import main
from diffcdc.engine.status import table_status
from diffcdc.errors import (
    LandingZoneMismatch,
    PublishConflict,
    StorageError,
    TransientStorageError,
)
from diffcdc.sinks.openmirroring.contract import table_folder
from diffcdc.sinks.openmirroring.landing import open_landing
from diffcdc.sinks.openmirroring.replay import replay
from diffcdc.state.store import TableState
from diffcdc.storage.adls import AdlsStore
from diffcdc.storage.base import is_temp_name
from tests.support.dfs_server import DfsServer
from tests.support.hypothesis_profiles import examples
from tests.support.replay_property import check_replay_property
from tests.support.snapshots import snapshot_sequences
from tests.support.token_credential import FakeTokenCredential
from tests.support.workspace import Workspace

pytestmark = pytest.mark.integration

FS = "ws"
ROOT = "db/Files/LandingZone"
FAST = {"retry_backoff": 0.01, "retry_backoff_max": 0.05}
ENV_SECRETS = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_SECRETS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[DfsServer]:
    with DfsServer() as srv:
        srv.create_filesystem(FS)
        yield srv
        wait_idle(srv)
        assert srv.errors == [], "the test server hit a bug:\n" + "\n".join(srv.errors)


@pytest.fixture
def adls_log() -> Iterator[list[logging.LogRecord]]:
    """Records of ``diffcdc.sinks.storage.adls`` (a handler of its own: the CLI may stop propagation)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("diffcdc.sinks.storage.adls")
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def wait_idle(server: DfsServer, timeout: float = 15.0) -> None:
    """Wait until no request is being handled (a dead client's slow requests finish late)."""
    deadline = time.monotonic() + timeout
    while any(server.inflight.values()) and time.monotonic() < deadline:
        time.sleep(0.05)


class RemoteWorkspace(Workspace):
    """A Workspace whose landing root is a folder on the loopback DFS server."""

    def __init__(
        self,
        root: str,
        server: DfsServer,
        *,
        table: str = "T",
        keys: tuple[str, ...] = ("id",),
        auth: dict[str, Any] | None = None,
        landing_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(root, table, keys, **options)
        self.server = server
        self.landing = server.url(FS, ROOT)
        auth = {"account_key": server.account_key} if auth is None else auth
        sink = self.table.sinks[0].model_copy(
            update={"landing": self.landing,
                    "landing_options": {**FAST, **auth, **(landing_options or {})}}
        )
        self.table = self.table.model_copy(update={"sinks": [sink]})

    @property
    def folder(self) -> str:  # in the server's filesystem
        return f"{ROOT}/{table_folder(self.table.name, self.table.schema_name)}"

    def storage(self) -> AdlsStore:
        storage = open_landing(self.landing, **self.table.sinks[0].landing_options)
        assert isinstance(storage, AdlsStore)
        return storage

    def names(self, sub: str = "") -> list[str]:
        return self.server.names(FS, f"{self.folder}/{sub}".rstrip("/"))

    def data_files(self) -> list[str]:
        return sorted(n for n in self.names() if n[0].isdigit())

    def temp_files(self) -> list[str]:
        return [n for n in self.names() if is_temp_name(n)]

    def landing_rows(self, name: str) -> list[dict[str, Any]]:
        data = self.server.read_file(FS, f"{self.folder}/{name}")
        assert data is not None, name
        return pq.read_table(io.BytesIO(data)).to_pylist()

    def mirror(self, upto: int | None = None):
        with self.storage() as storage:
            return replay(storage, table_folder(self.table.name, self.table.schema_name), upto)


def rows(ids: range | list[int], bump: int = 0) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "name": f"n{i}", "score": float(i + bump)} for i in ids], SCHEMA
    )


def seq(*numbers: int) -> list[str]:
    return [f"{n:020d}.parquet" for n in numbers]


def assert_renamed_once_in_order(ws: RemoteWorkspace) -> None:
    """Every data file became visible by exactly one rename, in sequence order."""
    targets = [dst.rsplit("/", 1)[-1] for _, dst in ws.server.renames
               if dst.rsplit("/", 1)[-1][0].isdigit()]
    assert all(count == 1 for count in Counter(targets).values()), targets
    assert targets == sorted(targets)
    assert ws.server.max_inflight["rename"] <= 1


def account_sas(server: DfsServer) -> str:
    return generate_account_sas(
        server.account,
        server.account_key,
        resource_types=ResourceTypes(service=True, file_system=True, object=True),
        permission="racwdl",
        expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1),
    )


# ------------------------------------------------------------------------------------------
# The property/replay test, remote


@pytest.mark.slow
@settings(max_examples=examples(3), deadline=None, suppress_health_check=list(HealthCheck))
@given(snapshots=snapshot_sequences())
def test_property_replay_against_a_remote_landing_root(spark, snapshots) -> None:
    with tempfile.TemporaryDirectory() as root, DfsServer(page_size=3) as server:
        server.create_filesystem(FS)
        ws = RemoteWorkspace(root, server, keys=("k1", "k2"), max_rows_per_file=4,
                             landing_options={"max_workers": 3})
        check_replay_property(spark, ws, snapshots)
        assert ws.temp_files() == []
        assert_renamed_once_in_order(ws)
        wait_idle(server)
        assert server.errors == []
        assert {r.auth for r in server.requests} == {"sharedkey"}


# ------------------------------------------------------------------------------------------
# Crashes and aborted publishes


@pytest.mark.slow
def test_process_killed_mid_remote_publish_is_resumed(spark, server, tmp_path, monkeypatch) -> None:
    ws = RemoteWorkspace(str(tmp_path), server, auth={})  # the key comes from the environment
    ws.write("0001.parquet", rows(range(9)))  # 5 files of at most 2 rows
    # Slow renames of file 2 give every worker time to start its upload before the crash.
    server.inject("rename", delay=0.5, path_contains=seq(2)[0])
    command = [
        sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--master", "local[1]",
        "--source", ws.source, "--keys", "id", "--table", "T", "--landing", ws.landing,
        "--state", ws.state, "--max-rows-per-file", "2",
        "--landing-option", "max_workers=4", "--landing-option", "retry_backoff=0.01",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(AZURE_STORAGE_ACCOUNT_KEY=server.account_key, DIFFCDC_CRASH_AT="publish:2")
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                          check=False, cwd=str(tmp_path))
    assert proc.returncode == 137, proc.stderr
    assert server.account_key not in proc.stdout + proc.stderr
    wait_idle(server)
    assert ws.data_files() == seq(1, 2)
    leftovers = ws.temp_files()
    assert leftovers, ws.names()  # uploads of files 3.. were under way when it died
    [status] = table_status(ws.state)
    assert status["unpublished"] and status["landing"] == ws.landing

    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", server.account_key)
    report = ws.run(spark)
    assert report.resumed_versions == [1] and report.outcome == "ok"
    assert ws.data_files() == seq(1, 2, 3, 4, 5)
    assert ws.temp_files() == []
    assert_renamed_once_in_order(ws)
    ws.assert_mirror_equals(spark, "0001.parquet")
    assert TableState(ws.state, "T").head().published
    assert ws.run(spark).outcome == "nothing to do"


def test_aborted_publish_is_finished_by_the_next_run(spark, server, tmp_path) -> None:
    ws = RemoteWorkspace(str(tmp_path), server, max_rows_per_file=2,
                         landing_options={"retry_total": 2, "max_workers": 3})
    ws.write("0001.parquet", rows(range(7)))  # files 1..4
    server.inject("rename", status=503, times=None, path_contains=seq(3)[0])
    with pytest.raises(TransientStorageError, match="HTTP 503 ServerBusy after 2 retries"):
        ws.run(spark)
    assert ws.data_files() == seq(1, 2)  # file 4 waits for file 3: order holds
    assert ws.temp_files() == []  # the abandoned uploads were removed
    [status] = table_status(ws.state)
    assert status["unpublished"] and "ServerBusy" in status["last_run"]["error"]

    server.clear_faults()
    # Debris: a temporary upload of ours from a crashed process, and files that are not ours.
    ours = f"_{seq(3)[0]}.0123456789ab.diffcdc-tmp"
    server.put_file(FS, f"{ws.folder}/{ours}", b"partial")
    server.put_file(FS, f"{ws.folder}/_partnerNotes.json", b"{}")
    report = ws.run(spark)
    assert report.resumed_versions == [1] and report.snapshots == []
    assert ws.data_files() == seq(1, 2, 3, 4)
    assert ws.temp_files() == [] and "_partnerNotes.json" in ws.names()
    assert_renamed_once_in_order(ws)
    ws.assert_mirror_equals(spark, "0001.parquet")


def test_foreign_files_are_never_overwritten(spark, server, tmp_path) -> None:
    ws = RemoteWorkspace(str(tmp_path), server, max_rows_per_file=2)
    ws.write("0001.parquet", rows(range(5)))
    first = f"{ws.folder}/{seq(1)[0]}"
    server.put_file(FS, first, b"foreign")
    with pytest.raises(LandingZoneMismatch, match="never wrote"):
        ws.run(spark)
    assert TableState(ws.state, "T").head() is None  # refused before anything was committed
    assert server.read_file(FS, first) == b"foreign"
    with ws.storage() as storage:
        storage.delete(f"T/{seq(1)[0]}")

    # Someone writes file 2 between our upload and our rename.
    server.inject("rename", conflict=True, path_contains=seq(2)[0])
    with pytest.raises(PublishConflict, match="different content"):
        ws.run(spark)
    with pytest.raises(PublishConflict):  # the rerun refuses too: never an overwrite
        ws.run(spark)
    assert server.read_file(FS, f"{ws.folder}/{seq(2)[0]}") == b"written by someone else"
    assert ws.data_files() == seq(1, 2) and ws.temp_files() == []
    assert not TableState(ws.state, "T").head().published


def test_a_missing_filesystem_fails_before_any_work(spark, server, tmp_path) -> None:
    ws = RemoteWorkspace(str(tmp_path), server)
    ws.table = ws.table.with_table_fields(landing=server.url("nosuchworkspace", ROOT))
    ws.write("0001.parquet", rows(range(3)))
    with pytest.raises(StorageError, match="filesystem 'nosuchworkspace' does not exist") as err:
        ws.run(spark)
    assert "workspace" in (err.value.hint or "")
    assert TableState(ws.state, "T").head() is None


# ------------------------------------------------------------------------------------------
# Faults, listing, TLS


def test_faults_during_a_run_still_replay_exactly(spark, server, tmp_path, adls_log) -> None:
    ws = RemoteWorkspace(str(tmp_path), server, max_rows_per_file=2,
                         landing_options={"max_workers": 3, "read_timeout": 0.5})
    ws.write("0001.parquet", rows(range(12)))  # files 1..6
    faults = [
        server.inject("append", status=503, nth=1),
        server.inject("append", status=429, retry_after="0", nth=3),
        server.inject("append", drop=True, nth=5),  # connection dropped mid-upload
        server.inject("flush", delay=1.0, nth=2),  # slower than read_timeout
        server.inject("list", status=500, nth=2),
        server.inject("head", status=503, nth=3),
        server.inject("rename", drop_response=True, nth=4),  # renamed, answer lost
    ]
    report = ws.run(spark)
    assert [f.fired for f in faults] == [1] * len(faults)
    assert report.snapshots[0].files == seq(1, 2, 3, 4, 5, 6)
    assert ws.data_files() == seq(1, 2, 3, 4, 5, 6) and ws.temp_files() == []
    assert_renamed_once_in_order(ws)
    ws.assert_mirror_equals(spark, "0001.parquet")
    retries = [r.getMessage() for r in adls_log if "retry" in r.getMessage()]
    assert any("HTTP 503 ServerBusy" in m for m in retries)
    assert any("HTTP 429 TooManyRequests" in m for m in retries)
    assert any("HTTP 500" in m for m in retries)
    assert len(retries) >= len(faults)


def test_continuation_reads_cleanup_folders_remotely_with_paging(spark, server, tmp_path) -> None:
    server.page_size = 2
    ws = RemoteWorkspace(str(tmp_path), server, max_rows_per_file=1)
    ws.write("0001.parquet", rows(range(5)))
    ws.run(spark)
    assert ws.data_files() == seq(1, 2, 3, 4, 5)
    # The mirroring service processed them and moved them away.
    for n, sub in ((1, "_FilesReadyToDelete"), (2, "_FilesReadyToDelete"),
                   (3, "_ProcessedFiles"), (4, "_ProcessedFiles"), (5, "_ProcessedFiles")):
        server.move_file(FS, f"{ws.folder}/{seq(n)[0]}", f"{ws.folder}/{sub}/{seq(n)[0]}")
    assert ws.data_files() == []

    before = len(server.requests)
    ws.write("0002.parquet", pa.concat_tables([rows([0], bump=1), rows(range(2, 5)), rows([9])]))
    report = ws.run(spark)
    assert report.snapshots[0].first_sequence == 6
    assert ws.data_files() == seq(6, 7, 8)  # update 0, delete 1, insert 9
    paged = {r.query.get("directory") for r in server.requests[before:]
             if r.op == "list" and r.query.get("continuation")}
    assert {ws.folder, f"{ws.folder}/_ProcessedFiles"} <= paged
    ws.assert_mirror_equals(spark, "0002.parquet")  # replay reads all three folders

    # A file beyond what we published, in a cleanup folder: someone else writes here.
    server.put_file(FS, f"{ws.folder}/_FilesReadyToDelete/{seq(12)[0]}", b"foreign")
    ws.write("0003.parquet", rows(range(2, 5)))
    with pytest.raises(LandingZoneMismatch, match="number 12"):
        ws.run(spark)
    assert TableState(ws.state, "T").head().version == 2


def test_engine_over_https_with_a_bearer_token(spark, tmp_path) -> None:
    with DfsServer(tls=True, bearer_tokens=("token-1",)) as server:
        server.create_filesystem(FS)
        credential = FakeTokenCredential("token-1")
        ws = RemoteWorkspace(str(tmp_path), server, auth={"credential": credential},
                             landing_options={"connection_verify": server.ca_path})
        assert ws.landing.startswith("https://")
        ws.write("0001.parquet", rows(range(3)))
        assert ws.run(spark).snapshots[0].files == seq(1)
        ws.assert_mirror_equals(spark, "0001.parquet")
        assert {r.auth for r in server.requests} == {"bearer"}
        wait_idle(server)
        assert server.errors == []


# ------------------------------------------------------------------------------------------
# CLI: run, status, verify remotely; secrets nowhere


def test_cli_run_status_verify_remote_without_leaking_secrets(
    spark, server, tmp_path, monkeypatch, capsys, caplog, cli_logging
) -> None:
    sas = account_sas(server)
    signature = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    wrong_key = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXk="
    secrets = {server.account_key, wrong_key, sas, signature, unquote(signature),
               quote(unquote(signature), safe="")}
    monkeypatch.setenv("TEST_LANDING_SAS", sas)
    monkeypatch.setenv("TEST_LANDING_KEY", server.account_key)
    for name in ("Keyed", "Sas", "SasUrl", "WrongKey", "Busy"):
        os.makedirs(tmp_path / "src" / name)
        pq.write_table(rows(range(5)), tmp_path / "src" / name / "0001.parquet")
    fast = "retry_backoff = 0.01, retry_backoff_max = 0.05, retry_total = 1"
    config = tmp_path / "diffcdc.toml"
    config.write_text(f"""
[diffcdc]
state = "state"
landing = "{server.url(FS, ROOT)}"

[defaults]
max_rows_per_file = 2

[tables.Keyed]
source = "src/Keyed"
keys = ["id"]
landing_options = {{ account_key = "{server.account_key}", {fast} }}

[tables.Sas]
source = "src/Sas"
keys = ["id"]
landing_options = {{ sas_token_env = "TEST_LANDING_SAS", {fast} }}

[tables.SasUrl]
source = "src/SasUrl"
keys = ["id"]
landing = "{server.url(FS, ROOT)}?{sas}"
landing_options = {{ {fast} }}

[tables.WrongKey]
source = "src/WrongKey"
keys = ["id"]
landing_options = {{ account_key = "{wrong_key}", {fast} }}

[tables.Busy]
source = "src/Busy"
keys = ["id"]
landing_options = {{ account_key_env = "TEST_LANDING_KEY", {fast} }}
""")
    server.inject("create", status=503, times=None, path_contains="Busy/")
    for name in ("azure", "urllib3"):  # the SDK's and urllib3's own records, wire level
        caplog.set_level(logging.DEBUG, logger=name)
    outputs = []

    def cli(*argv: str) -> tuple[int, dict[str, Any]]:
        code = main([*argv, "--json", "--debug"])
        out, err = capsys.readouterr()
        outputs.append(out + err)
        return code, json.loads(out)

    code, run = cli("run", "--config", str(config))
    assert code == 1
    outcome = {t["table"]: (t["outcome"], (t["error"] or {}).get("error")) for t in run["tables"]}
    assert outcome == {"Keyed": ("ok", None), "Sas": ("ok", None), "SasUrl": ("ok", None),
                       "WrongKey": ("failed", "StorageError"),
                       "Busy": ("failed", "TransientStorageError")}
    wrong = next(t for t in run["tables"] if t["table"] == "WrongKey")["error"]
    assert "access denied" in wrong["message"] and "account_key option" in wrong["hint"]
    assert {r.auth for r in server.requests} == {"sharedkey", "sas"}

    code, status = cli("status", "--state", str(tmp_path / "state"))
    tables = {t["table"]: t for t in status["tables"]}
    assert code == 0 and tables["Busy"]["unpublished"] and not tables["Keyed"]["unpublished"]
    assert {t["landing"] for t in tables.values() if t["landing"]} == {server.url(FS, ROOT)}

    snapshot = str(tmp_path / "src" / "Keyed" / "0001.parquet")
    for table in ("Keyed", "Sas"):
        code, verified = cli("verify", "--config", str(config), "--table", table,
                             "--snapshot", snapshot)
        assert code == 0 and verified["identical"] and verified["files"] == 3
    code, verified = cli(
        "verify", "--landing", server.url(FS, ROOT), "--table", "Keyed", "--snapshot", snapshot,
        "--state", str(tmp_path / "state"), "--landing-option", "account_key_env=TEST_LANDING_KEY",
    )
    assert code == 0 and verified["identical"]

    # The busy service recovers: the next run finishes the committed batch.
    server.clear_faults()
    code, run = cli("run", "--config", str(config), "--only", "Busy")
    assert code == 0 and run["tables"][0]["resumed_versions"] == [1]
    code, verified = cli("verify", "--config", str(config), "--table", "Busy",
                         "--snapshot", snapshot)
    assert code == 0 and verified["identical"]

    # Secrets are refused on the command line, and not echoed back.
    for argv in (["--landing-option", f"account_key={wrong_key}"],
                 ["--landing", f"{server.url(FS, ROOT)}?{sas}"]):
        code = main(["run", "--source", "s", "--keys", "id", "--table", "X",
                     "--landing", server.url(FS, ROOT), *argv])
        out, err = capsys.readouterr()
        outputs.append(out + err)
        assert code == 2 and "secret" in err

    texts = [*outputs, caplog.text]
    assert "urllib3" in caplog.text and "sig=" in caplog.text  # the wire was logged ...
    files = []
    for folder, _, names in os.walk(tmp_path):
        files += [os.path.join(folder, n) for n in names if os.path.join(folder, n) != str(config)]
    assert any(f.endswith("last_report.json") for f in files)
    assert any(os.sep + "log" + os.sep in f for f in files)  # commit records
    for path in files:
        with open(path, "rb") as handle:
            texts.append(handle.read().decode("utf-8", "replace"))
    for secret in secrets:
        for text in texts:
            assert secret not in text  # ... and no secret anywhere
