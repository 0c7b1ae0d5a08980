"""AdlsStore as a landing zone: the real azure-storage-file-datalake SDK against the loopback DFS server."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from azure.storage.filedatalake import ResourceTypes, generate_account_sas

from diffcdc.errors import ConfigError, PublishConflict, StorageError, TransientStorageError
from diffcdc.sinks.openmirroring.landing import (
    PublishItem,
    file_sha256,
    open_landing,
    publish_files,
    publish_one,
    put_staged,
    read_file,
    remove_temp_files,
)
from diffcdc.storage.adls import AdlsStore, parse_adls_url
from diffcdc.storage.base import is_temp_name
from tests.support.dfs_server import DfsServer
from tests.support.token_credential import FakeTokenCredential

pytestmark = pytest.mark.integration

FS = "ws"
ROOT = "db/Files/LandingZone"
FAST = {"retry_backoff": 0.01, "retry_backoff_max": 0.05}


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[DfsServer]:
    with DfsServer() as srv:
        srv.create_filesystem(FS)
        yield srv
        assert srv.errors == [], "the test server hit a bug:\n" + "\n".join(srv.errors)


@pytest.fixture
def open_storage() -> Iterator[Callable[..., AdlsStore]]:
    opened: list[AdlsStore] = []

    def make(url: str, **options: object) -> AdlsStore:
        storage = open_landing(url, **{**FAST, **options})
        assert isinstance(storage, AdlsStore)
        opened.append(storage)
        return storage

    yield make
    for storage in opened:
        storage.close()


@pytest.fixture
def storage(server: DfsServer, open_storage: Callable[..., AdlsStore]) -> AdlsStore:
    return open_storage(server.url(FS, ROOT), account_key=server.account_key, chunk_size=1024)


def stage(
    tmp_path, count: int, size: int = 3000, table: str = "T", seed: int = 0
) -> list[PublishItem]:
    """``count`` local files staged for ``<table>/0000...N.parquet``."""
    items = []
    for n in range(1, count + 1):
        local = tmp_path / f"stage-{seed}-{n}.bin"
        local.write_bytes(bytes((n * 7 + i + seed) % 251 for i in range(size + n)))
        items.append(
            PublishItem(str(local), f"{table}/{n:020d}.parquet", file_sha256(str(local)),
                        local.stat().st_size)
        )
    return items


def content(item: PublishItem) -> bytes:
    with open(item.local_path, "rb") as handle:
        return handle.read()


def landing_names(server: DfsServer, folder: str = "T") -> list[str]:
    return server.names(FS, f"{ROOT}/{folder}")


# ------------------------------------------------------------------------------------------
# URLs and options


def test_url_forms() -> None:
    loc, sas = parse_adls_url(
        "https://onelake.dfs.fabric.microsoft.com/My%20Workspace/db.MirroredDatabase"
        "/Files/LandingZone"
    )
    assert (loc.account_url, loc.file_system, loc.root, sas) == (
        "https://onelake.dfs.fabric.microsoft.com", "My Workspace",
        "db.MirroredDatabase/Files/LandingZone", None,
    )
    loc, _ = parse_adls_url("abfss://ws@onelake.dfs.fabric.microsoft.com/db/Files/LandingZone/")
    assert (loc.account_url, loc.file_system, loc.root) == (
        "https://onelake.dfs.fabric.microsoft.com", "ws", "db/Files/LandingZone")
    loc, _ = parse_adls_url("https://acct.blob.core.windows.net/fs/a/b")
    assert (loc.account_url, loc.account_name, loc.file_system, loc.root) == (
        "https://acct.dfs.core.windows.net", "acct", "fs", "a/b")
    loc, sas = parse_adls_url("http://127.0.0.1:10004/devacct/fs/x/y?sv=2025-01-05&sig=abc")
    assert (loc.account_url, loc.account_name, loc.file_system, loc.root, sas) == (
        "http://127.0.0.1:10004/devacct", "devacct", "fs", "x/y", "sv=2025-01-05&sig=abc")
    assert "sig" not in loc.display
    for bad in ("abfss://onelake.dfs.fabric.microsoft.com/db", "http://127.0.0.1:1/acct",
                "https://acct.dfs.core.windows.net"):
        with pytest.raises(ConfigError):
            parse_adls_url(bad)


def test_option_errors(server: DfsServer) -> None:
    with pytest.raises(ConfigError, match="unknown ADLS landing option"):
        AdlsStore.from_url(server.url(FS), account_key=server.account_key, max_worker=3)
    with pytest.raises(ConfigError, match="only one of"):
        AdlsStore.from_url(server.url(FS), account_key=server.account_key, sas_token="sig=x")
    with pytest.raises(ConfigError, match="https"):  # bearer tokens need TLS
        AdlsStore.from_url(server.url(FS), credential=FakeTokenCredential("t"))
    with pytest.raises(ConfigError):
        AdlsStore.from_url(server.url(FS), account_key=server.account_key, max_workers=0)


def test_credential_order(server: DfsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with AdlsStore.from_url("https://acct.dfs.core.windows.net/fs/x") as storage:
        assert storage.credential_source == "DefaultAzureCredential"  # nothing asked yet
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", account_sas(server))
    with AdlsStore.from_url(server.url(FS)) as storage:
        assert storage.credential_source == "AZURE_STORAGE_SAS_TOKEN"
        assert storage.list("") == []
    monkeypatch.setenv("AZURE_STORAGE_KEY", server.account_key)
    with AdlsStore.from_url(server.url(FS)) as storage:
        assert storage.credential_source == "AZURE_STORAGE_KEY"
        storage.list("")
    with AdlsStore.from_url(server.url(FS), account_key=server.account_key) as storage:
        assert storage.credential_source == "account_key option"
    assert [r.auth for r in server.requests] == ["sas", "sharedkey"]


# ------------------------------------------------------------------------------------------
# Atomic publish


def test_put_if_absent_then_conflict(storage: AdlsStore, server: DfsServer, tmp_path) -> None:
    local = tmp_path / "f.bin"
    local.write_bytes(os.urandom(5000))
    put_staged(storage, str(local), "T/00000000000000000001.parquet")
    assert server.read_file(FS, f"{ROOT}/T/00000000000000000001.parquet") == local.read_bytes()
    assert read_file(storage, "T/00000000000000000001.parquet") == local.read_bytes()
    assert server.count("append") == 5 and server.count("read") == 5  # 1 KiB chunks both ways
    info = storage.stat("T/00000000000000000001.parquet")
    assert info is not None and info.size == 5000 and abs(info.mtime - time.time()) < 60
    assert storage.stat("T/missing") is None and storage.stat("T") is None  # T is a folder

    other = tmp_path / "g.bin"
    other.write_bytes(b"different")
    with pytest.raises(FileExistsError):
        put_staged(storage, str(other), "T/00000000000000000001.parquet")
    assert server.read_file(FS, f"{ROOT}/T/00000000000000000001.parquet") == local.read_bytes()
    assert landing_names(server) == ["00000000000000000001.parquet"]  # temp removed
    rename = [r for r in server.requests if r.op == "rename"]
    assert [r.status for r in rename] == [201, 409]
    with pytest.raises(FileNotFoundError):
        read_file(storage, "T/missing")


def test_rename_conflict_from_a_racing_writer(storage: AdlsStore, server: DfsServer,
                                              tmp_path) -> None:
    [item] = stage(tmp_path, 1)
    server.inject("rename", conflict=True)  # someone else creates the target just before
    with pytest.raises(PublishConflict, match="different content"):
        publish_one(storage, item)
    assert server.read_file(FS, f"{ROOT}/{item.target}") == b"written by someone else"
    assert landing_names(server) == [item.target.split("/")[1]]


def test_publish_files_parallel_uploads_ordered_renames(
    server: DfsServer, open_storage: Callable[..., AdlsStore], tmp_path
) -> None:
    storage = open_storage(server.url(FS, ROOT), account_key=server.account_key, max_workers=4)
    items = stage(tmp_path, 8)
    server.inject("append", delay=0.1, times=None)  # slow uploads make the overlap visible
    seen: list[tuple[str, bool]] = []
    created = publish_files(storage, items, lambda item, new: seen.append((item.target, new)))
    assert created == 8
    assert seen == [(item.target, True) for item in items]
    assert [dst for _, dst in server.renames] == [f"{FS}/{ROOT}/{i.target}" for i in items]
    assert server.max_inflight["append"] >= 2  # uploads ran in parallel
    assert server.max_inflight["rename"] == 1  # renames never overlap
    for item in items:
        assert server.read_file(FS, f"{ROOT}/{item.target}") == content(item)
    assert not any(is_temp_name(n) for n in landing_names(server))

    # Publishing the same batch again (a resumed run) creates nothing and renames nothing.
    seen.clear()
    assert publish_files(storage, items, lambda item, new: seen.append((item.target, new))) == 0
    assert seen == [(item.target, False) for item in items]
    assert len(server.renames) == 8


def test_publish_files_stops_at_a_foreign_file(storage: AdlsStore, server: DfsServer,
                                               tmp_path) -> None:
    items = stage(tmp_path, 6)
    server.put_file(FS, f"{ROOT}/{items[2].target}", b"foreign")
    with pytest.raises(PublishConflict):
        publish_files(storage, items)
    names = landing_names(server)
    assert [n for n in names if not is_temp_name(n)] == [i.target.split("/")[1] for i in items[:3]]
    assert not any(is_temp_name(n) for n in names)  # abandoned uploads were cleaned up
    assert server.read_file(FS, f"{ROOT}/{items[2].target}") == b"foreign"


def test_crash_mid_publish_then_resume(storage: AdlsStore, server: DfsServer, tmp_path) -> None:
    items = stage(tmp_path, 5)
    server.inject("rename", status=500, times=None, path_contains=items[2].target)
    with pytest.raises(TransientStorageError):
        publish_files(storage, items)
    assert len(server.renames) == 2
    # A crashed process of ours also left a temporary upload behind.
    server.put_file(FS, f"{ROOT}/T/_{items[2].target[2:]}.0123456789ab.diffcdc-tmp", b"partial")
    server.clear_faults()

    assert remove_temp_files(storage, "T") == 1
    seen: list[bool] = []
    assert publish_files(storage, items, lambda _item, new: seen.append(new)) == 3
    assert seen == [False, False, True, True, True]
    assert landing_names(server) == [i.target.split("/")[1] for i in items]


def test_lost_rename_answer_counts_as_published(storage: AdlsStore, server: DfsServer,
                                                tmp_path) -> None:
    [item] = stage(tmp_path, 1)
    server.inject("rename", drop_response=True)  # renamed, but the client never hears it
    # the retried rename finds its source gone and the target in place: this run's own file
    assert publish_one(storage, item) is True
    assert server.read_file(FS, f"{ROOT}/{item.target}") == content(item)
    assert landing_names(server) == [item.target.split("/")[1]]


# ------------------------------------------------------------------------------------------
# Listing


def test_listing_pages(server: DfsServer, open_storage: Callable[..., AdlsStore],
                       tmp_path) -> None:
    for n in range(10):
        server.put_file(FS, f"{ROOT}/T/{n:020d}.parquet", b"x" * n)
    server.put_file(FS, f"{ROOT}/T/_ProcessedFiles/{1:020d}.parquet", b"old")
    server.page_size = 3
    storage = open_storage(server.url(FS, ROOT), account_key=server.account_key)
    files = storage.list("T")
    assert [f.name for f in files] == [f"{n:020d}.parquet" for n in range(10)]
    assert [f.size for f in files] == list(range(10))
    lists = [r for r in server.requests if r.op == "list"]
    assert len(lists) == 4  # 11 entries (10 files + 1 folder), 3 per page
    assert [bool(r.query.get("continuation")) for r in lists] == [False, True, True, True]
    assert [f.name for f in storage.list("T/_ProcessedFiles")] == [f"{1:020d}.parquet"]
    assert storage.list("T/_FilesReadyToDelete") == []  # missing folder: empty

    server.page_size = 5000
    small_pages = open_storage(server.url(FS, ROOT), account_key=server.account_key,
                               list_page_size=4)
    assert len(small_pages.list("T")) == 10
    assert [r.query.get("maxResults") for r in server.requests if r.op == "list"][-3:] == ["4"] * 3


def test_folders_and_deletes(storage: AdlsStore, server: DfsServer) -> None:
    server.put_file(FS, f"{ROOT}/T/a/b.parquet", b"1")
    server.put_file(FS, f"{ROOT}/T/c.parquet", b"2")
    assert storage.folder_exists("T") and storage.folder_exists("") and storage.folder_exists("T/a")
    assert not storage.folder_exists("U") and not storage.folder_exists("T/c.parquet")
    storage.delete("T/c.parquet")
    storage.delete("T/c.parquet")  # absent: no error
    storage.delete_tree("T")
    storage.delete_tree("T")
    assert server.names(FS, ROOT) == []


# ------------------------------------------------------------------------------------------
# Retries and faults


def test_retries_on_503_and_429(storage: AdlsStore, server: DfsServer, tmp_path,
                                caplog: pytest.LogCaptureFixture) -> None:
    [item] = stage(tmp_path, 1, size=4000)
    server.inject("append", status=503, nth=2, times=2)
    server.inject("flush", status=429, retry_after="0")
    with caplog.at_level(logging.WARNING, logger="diffcdc.sinks.storage.adls"):
        assert publish_one(storage, item) is True
    assert server.count("append", 503) == 2 and server.count("flush", 429) == 1
    assert server.read_file(FS, f"{ROOT}/{item.target}") == content(item)
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 3 and "HTTP 503 ServerBusy" in retries[0]
    assert "HTTP 429 TooManyRequests" in retries[2]


def test_permanent_503_fails_in_bounded_time(
    server: DfsServer, open_storage: Callable[..., AdlsStore], tmp_path
) -> None:
    storage = open_storage(server.url(FS, ROOT), account_key=server.account_key, retry_total=3)
    [item] = stage(tmp_path, 1)
    server.inject("append", status=503, times=None)
    started = time.monotonic()
    with pytest.raises(TransientStorageError, match="HTTP 503 ServerBusy after 3 retries") as err:
        publish_one(storage, item)
    assert time.monotonic() - started < 5
    assert err.value.transient and err.value.path == item.target
    assert server.count("append") == 4  # the first try and three retries
    assert landing_names(server) == []  # the temporary file was removed


def test_dropped_connection_mid_upload_is_retried(storage: AdlsStore, server: DfsServer,
                                                  tmp_path) -> None:
    [item] = stage(tmp_path, 1, size=5000)
    server.inject("append", drop=True, nth=3)
    assert publish_one(storage, item) is True
    appends = [r.status for r in server.requests if r.op == "append"]
    assert appends.count(-1) == 1 and appends.count(202) == 5
    assert server.read_file(FS, f"{ROOT}/{item.target}") == content(item)


def test_slow_response_times_out_and_is_retried(
    server: DfsServer, open_storage: Callable[..., AdlsStore], tmp_path
) -> None:
    storage = open_storage(server.url(FS, ROOT), account_key=server.account_key, read_timeout=0.4)
    [item] = stage(tmp_path, 1)
    server.inject("flush", delay=1.0)
    assert publish_one(storage, item) is True
    assert server.read_file(FS, f"{ROOT}/{item.target}") == content(item)
    time.sleep(0.8)  # let the slow handler finish (and record itself)
    assert server.count("flush") == 2


def test_failed_upload_removes_its_temp_file(storage: AdlsStore, server: DfsServer,
                                             tmp_path) -> None:
    [item] = stage(tmp_path, 1)
    server.inject("flush", status=400, error_code="InvalidFlushPosition")
    with pytest.raises(StorageError, match="InvalidFlushPosition") as err:
        publish_one(storage, item)
    assert not isinstance(err.value, TransientStorageError)
    assert landing_names(server) == []
    server.put_file(FS, f"{ROOT}/T/_x.parquet.abcdefabcdef.diffcdc-tmp", b"1")
    server.put_file(FS, f"{ROOT}/T/_metadata.json", b"{}")
    assert remove_temp_files(storage, "T") == 1
    assert landing_names(server) == ["_metadata.json"]


# ------------------------------------------------------------------------------------------
# Authentication and secrets


def account_sas(server: DfsServer, permission: str = "racwdl", hours: float = 1) -> str:
    return generate_account_sas(
        server.account,
        server.account_key,
        resource_types=ResourceTypes(service=True, file_system=True, object=True),
        permission=permission,
        expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=hours),
    )


def test_wrong_account_key_is_refused(server: DfsServer, open_storage: Callable[..., AdlsStore],
                                      tmp_path) -> None:
    wrong = base64.b64encode(os.urandom(64)).decode()
    storage = open_storage(server.url(FS, ROOT), account_key=wrong)
    with pytest.raises(StorageError, match="access denied") as err:
        storage.list("T")
    assert "403" in str(err.value) and "AuthenticationFailed" in str(err.value)
    assert not isinstance(err.value, TransientStorageError)
    [item] = stage(tmp_path, 1)
    with pytest.raises(StorageError, match="access denied") as err2:
        publish_one(storage, item)
    for text in (str(err.value), str(err2.value), repr(storage), storage.describe()):
        assert wrong not in text and server.account_key not in text
    assert {r.auth for r in server.requests} == {"sharedkey"}
    assert {r.status for r in server.requests} == {403}


def test_sas_token(server: DfsServer, open_storage: Callable[..., AdlsStore], tmp_path,
                   caplog: pytest.LogCaptureFixture) -> None:
    sas = account_sas(server)
    signature = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    storage = open_storage(f"{server.url(FS, ROOT)}?{sas}")
    items = stage(tmp_path, 3)
    with caplog.at_level(logging.DEBUG):
        assert publish_files(storage, items) == 3
        assert len(storage.list("T")) == 3
        assert read_file(storage, items[0].target) == content(items[0])
        storage.delete(items[0].target)
    assert {r.auth for r in server.requests} == {"sas"}
    assert "urllib3" in caplog.text  # the wire was logged at DEBUG ...
    for text in (caplog.text, repr(storage), storage.describe()):
        assert signature not in text and "sig=" + signature not in text  # ... without the SAS

    read_only = open_storage(server.url(FS, ROOT), sas_token=account_sas(server, "rl"))
    assert len(read_only.list("T")) == 2
    with pytest.raises(StorageError, match="AuthorizationPermissionMismatch"):
        publish_one(read_only, stage(tmp_path, 1, table="U")[0])

    expired = open_storage(server.url(FS, ROOT), sas_token=account_sas(server, hours=-1))
    with pytest.raises(StorageError, match="access denied") as err:
        expired.list("T")
    assert "sig=" not in str(err.value)


def test_no_secret_in_network_errors(open_storage: Callable[..., AdlsStore], tmp_path,
                                     caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key = base64.b64encode(os.urandom(64)).decode()
    sas = "sv=2025-01-05&ss=b&srt=sco&sp=rl&se=2099-01-01T00%3A00%3A00Z&sig=SECRETsig%2Bvalue%3D"
    for options in ({"account_key": key}, {"sas_token": sas}):
        storage = open_storage(f"http://127.0.0.1:{port}/acct/{FS}/{ROOT}", retry_total=1,
                               connection_timeout=1, **options)
        with caplog.at_level(logging.DEBUG), pytest.raises(TransientStorageError) as err:
            storage.list("T")
        for text in (str(err.value), repr(err.value.to_dict()), caplog.text):
            assert key not in text and "SECRETsig" not in text
        assert "network error" in str(err.value)


def test_bearer_token_over_https(open_storage: Callable[..., AdlsStore], tmp_path) -> None:
    with DfsServer(tls=True, bearer_tokens=("token-123",)) as server:
        server.create_filesystem(FS)
        credential = FakeTokenCredential("token-123")
        storage = open_storage(server.url(FS, ROOT), credential=credential,
                               connection_verify=server.ca_path)
        items = stage(tmp_path, 2)
        assert publish_files(storage, items) == 2
        assert [f.name for f in storage.list("T")] == [i.target[2:] for i in items]
        assert {r.auth for r in server.requests} == {"bearer"}
        assert credential.scopes[0] == ("https://storage.azure.com/.default",)

        wrong = open_storage(server.url(FS, ROOT), credential=FakeTokenCredential("nope"),
                             connection_verify=server.ca_path)
        with pytest.raises(StorageError, match="access denied"):
            wrong.list("T")

        untrusted = open_storage(server.url(FS, ROOT), credential=credential)
        with pytest.raises(StorageError, match="not trusted") as err:
            untrusted.list("T")
        assert not isinstance(err.value, TransientStorageError)
        assert server.errors == []
