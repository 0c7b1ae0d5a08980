"""One contract for every byte store backend (:mod:`diffcdc.storage`): a local folder, a local
mount without ``link()``/``flock``, ADLS Gen2 against the loopback DFS server (the real
``azure-storage-file-datalake`` client) and WebHDFS against the loopback WebHDFS server (fsspec's
client). No JVM: every case is in the unit tier."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from diffcdc.errors import StorageError, TransientStorageError
from diffcdc.storage import paths
from diffcdc.storage.base import ByteStore, MarkerReplace, is_temp_name
from diffcdc.storage.local import LocalStore
from diffcdc.storage.registry import open_store
from tests.support import nolink
from tests.support.concurrency import race
from tests.support.dfs_server import DfsServer
from tests.support.webhdfs_server import WebHdfsServer

FAST = {"retry_backoff": 0.01, "retry_backoff_max": 0.05}


@dataclass
class Backend:
    """A store under test, and how the test reaches behind it."""

    store: ByteStore
    #: The file on local disk behind a store path (None: not reachable so).
    on_disk: Callable[[str], str] | None
    #: The ADLS test server (its fault injection), when the store is one.
    dfs: DfsServer | None = None


@pytest.fixture(params=["local", "nolink", "adls", "webhdfs"])
def backend(request: pytest.FixtureRequest, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    kind = request.param
    if kind in ("local", "nolink"):
        root = str(tmp_path / "store")
        if kind == "nolink":
            nolink.disable(root, monkeypatch.setattr)
        yield Backend(LocalStore(root, reservations=True), lambda p: os.path.join(root, p))
    elif kind == "adls":
        with DfsServer() as server:
            server.create_filesystem("ws")
            store = open_store(server.url("ws", "lake/store"), account_key=server.account_key, **FAST)
            yield Backend(store, None, server)
            store.close()
            assert server.errors == [], "the test server hit a bug:\n" + "\n".join(server.errors)
    else:
        with WebHdfsServer(str(tmp_path / "webhdfs")) as server:
            yield Backend(open_store(server.url("store")), lambda p: server.local(f"store/{p}"))


def leftovers(store: ByteStore, folder: str) -> list[str]:
    return [n for n in store.names(folder) if is_temp_name(n) or ".cas." in n]


# -- reading and listing ---------------------------------------------------------------------


def test_reads_lists_and_deletes(backend: Backend) -> None:
    store = backend.store
    assert store.read("a/x.json") is None and store.stat("a/x.json") is None
    assert store.list("a") == [] and store.folders("") == [] and not store.folder_exists("a")
    store.put("a/x.json", b"one")
    store.put("a/b c/f:1.bin", b"x" * 10)
    found = store.read("a/x.json")
    assert found is not None and found.data == b"one" and found.mtime > 0
    assert [(f.name, f.size) for f in store.list("a")] == [("x.json", 3)]
    assert store.folders("a") == ["b c"] and store.folder_exists("a/b c")
    info = store.stat("a/b c/f:1.bin")
    assert info is not None and (info.name, info.size) == ("f:1.bin", 10)
    assert store.stat("a/b c") is None  # a folder is not a file
    with store.open_read("a/b c/f:1.bin") as handle:
        assert handle.read() == b"x" * 10
    with pytest.raises(FileNotFoundError):
        store.open_read("a/missing")
    store.put("a/x.json", b"two")  # put replaces
    assert store.read_bytes("a/x.json") == b"two"
    store.put("a/d.json", json.dumps({"k": 1}).encode())
    assert store.read_json("a/d.json") == {"k": 1}
    store.delete("a/x.json")
    store.delete("a/x.json")  # no error when missing
    assert store.names("a") == ["d.json"]
    store.delete_tree("a")
    store.delete_tree("a")
    assert not store.folder_exists("a") and store.list("a") == []
    assert leftovers(store, "") == []


def test_a_folder_of_the_store_is_a_store(backend: Backend) -> None:
    table = backend.store.at("T")
    table.put_if_absent("log/1.json", b"1")
    assert backend.store.read_bytes("T/log/1.json") == b"1"
    assert table.names("log") == ["1.json"] and backend.store.folders("") == ["T"]
    assert table.describe("log/1.json") == backend.store.describe("T/log/1.json")
    tag = table.read("log/1.json").tag
    assert table.replace_if("log/1.json", b"2", tag, stale_after=60)
    assert backend.store.read_bytes("T/log/1.json") == b"2"
    table.makedirs("versions/v1")
    with pytest.raises(FileExistsError):
        table.makedirs("versions/v1", exist_ok=False)


# -- put-if-absent, rename without overwrite, replace-if-unchanged ---------------------------


def test_put_if_absent_has_exactly_one_winner_and_is_never_half_written(backend: Backend) -> None:
    store = backend.store

    def put(i: int) -> bool:
        try:
            store.put_if_absent("log/00000000000000000001.json", f'{{"run": {i}}}'.encode())
            return True
        except FileExistsError:
            return False

    results = race(put, n=6)
    assert results.count(True) == 1, results
    winner = results.index(True)
    assert json.loads(store.read_bytes("log/00000000000000000001.json")) == {"run": winner}
    assert store.names("log") == ["00000000000000000001.json"]  # no temp file left


def test_an_empty_file_reads_as_absent_and_blocks_the_name(backend: Backend) -> None:
    """A local mount without link() reserves a name empty for a moment; a writer killed then
    leaves it so."""
    store = backend.store
    store.put("log/00000000000000000002.json", b"")
    assert store.read_bytes("log/00000000000000000002.json") is None
    assert not store.exists("log/00000000000000000002.json")
    with pytest.raises(FileExistsError):
        store.put_if_absent("log/00000000000000000002.json", b"{}")


def test_rename_never_overwrites(backend: Backend) -> None:
    store = backend.store
    store.put("f/target", b"theirs")
    temp = store.write_temp("f/target", b"mine")
    assert is_temp_name(temp.rsplit("/", 1)[-1])
    with pytest.raises(FileExistsError):
        store.rename(temp, "f/target")
    assert store.read_bytes("f/target") == b"theirs"
    assert store.names("f") == ["target"]  # the source is removed
    store.put_file_if_absent(io.BytesIO(b"streamed"), "f/new")
    assert store.read_bytes("f/new") == b"streamed"
    with pytest.raises(FileExistsError):
        store.put_file_if_absent(io.BytesIO(b"other"), "f/new")
    assert store.names("f") == ["new", "target"]


def test_replace_if_is_decided_by_the_tag(backend: Backend) -> None:
    store = backend.store
    store.put_if_absent("lease.json", b"old")
    tag = store.read("lease.json").tag
    results = race(lambda i: store.replace_if("lease.json", f"new{i}".encode(), tag, stale_after=60), n=6)
    assert results.count(True) == 1, results
    assert store.read_bytes("lease.json") == f"new{results.index(True)}".encode()
    assert not store.replace_if("lease.json", b"late", tag, stale_after=60)
    assert not store.replace_if("missing.json", b"x", tag, stale_after=60)
    assert leftovers(store, "") == []


def test_replace_if_passes_a_marker_left_by_a_dead_writer_once_stale(backend: Backend) -> None:
    store = backend.store
    if not isinstance(store, MarkerReplace) or backend.on_disk is None:
        pytest.skip("the service decides a conditional replace: no markers")
    store.put_if_absent("lease.json", b"old")
    tag = store.read("lease.json").tag
    marker = f"lease.json.cas.{tag}.0"
    store.put(marker, b"")  # a taker died between its marker and its rename
    assert not store.replace_if("lease.json", b"new", tag, stale_after=60)  # maybe alive
    os.utime(backend.on_disk(marker), (0, 0))
    assert store.replace_if("lease.json", b"new", tag, stale_after=60)
    assert store.read_bytes("lease.json") == b"new"
    assert leftovers(store, "") == []


# -- commit state unknown --------------------------------------------------------------------


def lose_first_answer(store: ByteStore, monkeypatch: pytest.MonkeyPatch,
                      before_retry: Callable[[], None] = lambda: None) -> None:
    """The next rename lands but its answer is lost: the client retries it, and the retry
    finds the target there (``before_retry`` runs between the two: another writer's move)."""
    real = store._rename_new

    def rename(source: str, target: str) -> None:
        monkeypatch.setattr(store, "_rename_new", real)
        real(source, target)
        before_retry()
        real(source, target)  # the retry: FileExistsError

    monkeypatch.setattr(store, "_rename_new", rename)


def test_a_put_whose_answer_was_lost_is_its_own_not_a_conflict(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commit state unknown: the rename that creates a commit record lands, its answer is lost,
    the retry finds the record. The same bytes are this writer's own (the put succeeded);
    different bytes are another writer's (a conflict)."""
    store = backend.store
    lose_first_answer(store, monkeypatch)
    store.put_if_absent("log/00000000000000000001.json", b"this run's record")
    assert store.read_bytes("log/00000000000000000001.json") == b"this run's record"
    assert store.names("log") == ["00000000000000000001.json"]  # no temp left

    with pytest.raises(FileExistsError):  # another run's record is still a conflict
        store.put_if_absent("log/00000000000000000001.json", b"another run's record")

    def another_writer_replaces_it() -> None:
        store.delete("log/00000000000000000002.json")
        store.put("log/00000000000000000002.json", b"another run's record")

    lose_first_answer(store, monkeypatch, another_writer_replaces_it)
    with pytest.raises(FileExistsError):
        store.put_if_absent("log/00000000000000000002.json", b"this run's record")
    assert store.read_bytes("log/00000000000000000002.json") == b"another run's record"
    assert leftovers(store, "log") == []


def test_a_rename_whose_answer_was_lost_is_its_own_not_a_conflict(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a rename (a landing file published from a staged upload): its source is
    gone and the target is there — its own; a target that was there before is a conflict."""
    store = backend.store
    temp = store.write_temp("zone/1.parquet", b"part")
    lose_first_answer(store, monkeypatch)
    store.rename(temp, "zone/1.parquet")
    assert store.read_bytes("zone/1.parquet") == b"part" and store.names("zone") == ["1.parquet"]

    store.put("zone/2.parquet", b"theirs")
    temp = store.write_temp("zone/2.parquet", b"mine")
    with pytest.raises(FileExistsError):
        store.rename(temp, "zone/2.parquet")
    assert store.read_bytes("zone/2.parquet") == b"theirs"
    assert store.names("zone") == ["1.parquet", "2.parquet"]


def test_a_commit_whose_answer_the_adls_service_lost_is_its_own(backend: Backend) -> None:
    """On ADLS the lost answer is real: the server drops the rename's response, the SDK
    retries, the retry's source is gone (HTTP 404) and the target is there."""
    if backend.dfs is None:
        pytest.skip("a fault of the loopback DFS server")
    store = backend.store
    backend.dfs.inject("rename", drop_response=True, times=1, path_contains="log/")
    store.put_if_absent("log/00000000000000000001.json", b"this run's record")
    assert store.read_bytes("log/00000000000000000001.json") == b"this run's record"
    assert backend.dfs.names("ws", "lake/store/log") == ["00000000000000000001.json"]
    with pytest.raises(FileExistsError):
        store.put_if_absent("log/00000000000000000001.json", b"another run's record")


# -- files by path or URL (the state data folder) -----------------------------------------


def test_the_state_data_functions_work_the_same_on_a_path_and_a_url(tmp_path) -> None:
    """The path-level functions (files of the state data folder, by path or URL) on the local
    and the WebHDFS backend."""
    webhdfs = WebHdfsServer(str(tmp_path / "webhdfs")).start()
    for folder in (str(tmp_path / "local"), webhdfs.url("fs")):
        path = paths.join(folder, "a b", "f:1.bin")
        assert paths.listdir(folder) == [] and not paths.exists(path)
        paths.makedirs(paths.join(folder, "a b"))
        paths.write_bytes(path, b"x" * 10)
        assert paths.read_bytes(path) == b"x" * 10 and paths.size(path) == 10
        paths.write_bytes(paths.join(folder, "a b", "g"), b"new")
        paths.move(paths.join(folder, "a b", "g"), path)  # replaces the file
        assert paths.read_bytes(path) == b"new"
        with pytest.raises(FileExistsError):
            paths.makedirs(paths.join(folder, "a b"), exist_ok=False)
        assert paths.data_files(folder) == ["a b/f:1.bin"]
        assert paths.relative(path, folder) == "a b/f:1.bin"
        paths.remove_tree(paths.join(folder, "a b"))
        paths.remove_tree(paths.join(folder, "missing"))
        assert paths.listdir(folder) == [] and not paths.isdir(paths.join(folder, "a b"))
        with pytest.raises(FileNotFoundError):
            paths.read_bytes(path)

    webhdfs.refuse()
    with pytest.raises(StorageError) as caught:
        paths.read_bytes(webhdfs.url("fs/x"))
    assert webhdfs.url("fs/x") in str(caught.value) and "\n" not in str(caught.value)
    webhdfs.stop()
    with pytest.raises(TransientStorageError):
        paths.listdir(webhdfs.url("fs"))
