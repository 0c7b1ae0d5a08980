"""A loopback WebHDFS server over a local folder, for tests (127.0.0.1, a free port).

It speaks the part of the WebHDFS REST API (``/webhdfs/v1/<path>?op=...``) that Hadoop's
``WebHdfsFileSystem`` (Spark) and fsspec's ``WebHDFS`` use: GETFILESTATUS, LISTSTATUS(_BATCH),
GETFILEBLOCKLOCATIONS, GETHOMEDIRECTORY, GETSERVERDEFAULTS, OPEN (redirected, ``offset`` and
``length``), MKDIRS, CREATE (redirected to the "datanode", which is this server again), APPEND,
RENAME (HDFS semantics: false when the source is missing or the target is a file), DELETE,
and the SET* ops as no-ops. Responses carry no ``Content-Type``: the shaded Hadoop client in
pyspark has no JAX-RS runtime to parse one.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/webhdfs/v1"


def _status(path: str, name: str = "") -> dict[str, Any]:
    st = os.stat(path)
    folder = os.path.isdir(path)
    return {"accessTime": int(st.st_atime * 1000), "blockSize": 134217728,
            "childrenNum": len(os.listdir(path)) if folder else 0, "fileId": st.st_ino,
            "group": "supergroup", "length": 0 if folder else st.st_size,
            "modificationTime": int(st.st_mtime * 1000), "owner": "root", "pathSuffix": name,
            "permission": "755" if folder else "644", "replication": 0 if folder else 1,
            "storagePolicy": 0, "type": "DIRECTORY" if folder else "FILE"}


def _remote(status: int, exception: str, java: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"RemoteException": {"exception": exception, "javaClassName": java,
                                        "message": message}}


class WebHdfsServer:
    """A WebHDFS server whose files are the folder ``root``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.requests: Counter[str] = Counter()
        self.refusing = False
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    def start(self) -> WebHdfsServer:
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> WebHdfsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port  # kept once stopped: a URL of a server that is down

    def url(self, path: str = "") -> str:
        return f"webhdfs://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def local(self, path: str = "") -> str:
        """The file or folder on disk behind ``path``."""
        return os.path.join(self.root, path.lstrip("/"))

    def count(self, op: str) -> int:
        with self._lock:
            return self.requests[op.upper()]

    def refuse(self) -> None:
        """Answer every request with 503 (a server that is up but not serving)."""
        self.refusing = True

    def restore(self) -> None:
        self.refusing = False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state: WebHdfsServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, document: Any = None, body: bytes = b"",
              headers: tuple[tuple[str, str], ...] = ()) -> None:
        data = json.dumps(document).encode() if document is not None else body
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self, method: str) -> None:
        state = self.server_state
        parts = urllib.parse.urlsplit(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items()}
        op = query.get("op", "").upper()
        with state._lock:
            state.requests[op] += 1
        body = self._body() if method in ("PUT", "POST") else b""
        if state.refusing:
            return self._send(503, body=b"unavailable")
        path = urllib.parse.unquote(parts.path[len(PREFIX):]) or "/"
        local = os.path.normpath(os.path.join(state.root, path.lstrip("/")))
        if local != state.root and not local.startswith(state.root + os.sep):
            return self._send(*_remote(403, "AccessControlException",
                                       "org.apache.hadoop.security.AccessControlException", path))
        try:
            answer = _OPS.get((method, op))
            if answer is None:
                return self._send(*_remote(400, "UnsupportedOperationException",
                                           "java.lang.UnsupportedOperationException", f"{method} {op}"))
            answer(self, path, local, query, body)
        except FileNotFoundError:
            self._send(*_remote(404, "FileNotFoundException", "java.io.FileNotFoundException",
                                f"File does not exist: {path}"))

    def _redirect(self, path: str, query: dict[str, str]) -> None:
        location = (f"http://127.0.0.1:{self.server_state.port}{PREFIX}{urllib.parse.quote(path)}?"
                    + urllib.parse.urlencode({**query, "datanode": "true"}))
        self._send(307, headers=(("Location", location),))

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def _file_status(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    h._send(200, {"FileStatus": _status(local)})


def _list_status(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    if os.path.isdir(local):
        items = [_status(os.path.join(local, n), n) for n in sorted(os.listdir(local))]
    else:
        items = [_status(local)]
    if q.get("op", "").upper() == "LISTSTATUS":
        return h._send(200, {"FileStatuses": {"FileStatus": items}})
    h._send(200, {"DirectoryListing": {"partialListing": {"FileStatuses": {"FileStatus": items}},
                                       "remainingEntries": 0}})


def _block_locations(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    size = os.path.getsize(local)
    where = {"cachedHosts": [], "corrupt": False, "hosts": ["127.0.0.1"], "length": size,
             "names": ["127.0.0.1:9866"], "offset": 0, "storageTypes": ["DISK"],
             "topologyPaths": ["/default-rack/127.0.0.1:9866"]}
    h._send(200, {"BlockLocations": {"BlockLocation": [where]}})


def _open(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    if not os.path.isfile(local):
        raise FileNotFoundError(path)
    if "datanode" not in q:
        return h._redirect(path, q)
    with open(local, "rb") as handle:
        handle.seek(int(q.get("offset") or 0))
        length = q.get("length")
        h._send(200, body=handle.read(int(length)) if length else handle.read())


def _mkdirs(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    os.makedirs(local, exist_ok=True)
    h._send(200, {"boolean": True})


def _create(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    if os.path.exists(local) and q.get("overwrite", "false").lower() != "true":
        return h._send(*_remote(403, "FileAlreadyExistsException",
                                "org.apache.hadoop.fs.FileAlreadyExistsException", path))
    if "datanode" not in q:
        return h._redirect(path, q)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    overwrite = q.get("overwrite", "false").lower() == "true"
    try:  # the namenode decides again when the datanode creates it: exclusive, as in HDFS
        with open(local, "wb" if overwrite else "xb") as handle:
            handle.write(body)
    except FileExistsError:
        return h._send(*_remote(403, "FileAlreadyExistsException",
                                "org.apache.hadoop.fs.FileAlreadyExistsException", path))
    h._send(201, headers=(("Location", f"hdfs://127.0.0.1{path}"),))


def _append(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    if not os.path.isfile(local):
        raise FileNotFoundError(path)
    if "datanode" not in q:
        return h._redirect(path, q)
    with open(local, "ab") as handle:
        handle.write(body)
    h._send(200)


def _rename(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    target = os.path.join(h.server_state.root, urllib.parse.unquote(q["destination"]).lstrip("/"))
    if not os.path.exists(local) or (os.path.exists(target) and not os.path.isdir(target)):
        return h._send(200, {"boolean": False})
    if os.path.isdir(target):
        target = os.path.join(target, os.path.basename(local))
    if not os.path.isdir(os.path.dirname(target)):
        return h._send(200, {"boolean": False})
    os.rename(local, target)
    h._send(200, {"boolean": True})


def _delete(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    if not os.path.lexists(local):
        return h._send(200, {"boolean": False})
    if os.path.isdir(local):
        if os.listdir(local) and q.get("recursive", "false").lower() != "true":
            return h._send(*_remote(403, "PathIsNotEmptyDirectoryException",
                                    "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException", path))
        shutil.rmtree(local)
    else:
        os.remove(local)
    h._send(200, {"boolean": True})


def _no_op(h: _Handler, path: str, local: str, q: dict[str, str], body: bytes) -> None:
    h._send(200)


_DEFAULTS = {"FsServerDefaults": {"replication": 1, "encryptDataTransfer": "false",
                                  "defaultStoragePolicyId": 7, "writePacketSize": 65536,
                                  "fileBufferSize": 4096, "checksumType": 2, "trashInterval": 0,
                                  "keyProviderUri": "", "blockSize": 134217728,
                                  "bytesPerChecksum": 512}}

_OPS = {
    ("GET", "GETFILESTATUS"): _file_status,
    ("GET", "LISTSTATUS"): _list_status,
    ("GET", "LISTSTATUS_BATCH"): _list_status,
    ("GET", "GETFILEBLOCKLOCATIONS"): _block_locations,
    ("GET", "GETHOMEDIRECTORY"): lambda h, *a: h._send(200, {"Path": "/user/root"}),
    ("GET", "GETSERVERDEFAULTS"): lambda h, *a: h._send(200, _DEFAULTS),
    ("GET", "OPEN"): _open,
    ("PUT", "MKDIRS"): _mkdirs,
    ("PUT", "CREATE"): _create,
    ("POST", "APPEND"): _append,
    ("PUT", "RENAME"): _rename,
    ("DELETE", "DELETE"): _delete,
    ("PUT", "SETPERMISSION"): _no_op,
    ("PUT", "SETOWNER"): _no_op,
    ("PUT", "SETTIMES"): _no_op,
    ("PUT", "SETREPLICATION"): lambda h, *a: h._send(200, {"boolean": True}),
}
