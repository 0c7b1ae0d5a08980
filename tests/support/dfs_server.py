"""A loopback ADLS Gen2 server: the DFS REST calls ``azure-storage-file-datalake`` makes.

No emulator implements the DFS API (Azurite has only Blob), so tests run the real SDK against
this one. It listens on 127.0.0.1 only, path style (``http://127.0.0.1:<port>/<account>/
<filesystem>/<path>``), over http or https (self-signed certificate made with ``cryptography``).

What it implements, with the service's status codes, ``x-ms-error-code`` headers and JSON (DFS)
or XML (Blob) error bodies:

* filesystems: create (``resource=filesystem`` or ``restype=container``), properties, delete;
* paths: create (``resource=file|directory``, parents created implicitly), append
  (``action=append&position=``, ``Content-MD5`` checked), flush (``action=flush&position=``, data
  must be contiguous), rename (``x-ms-rename-source``, ``If-None-Match: *`` → 409
  PathAlreadyExists, source conditions, missing destination parent → 404), properties (HEAD,
  ``hdi_isfolder`` metadata on directories, as the Blob endpoint the SDK uses for it), read (GET
  with ``x-ms-range``/``Range``, 206/416), list (``resource=filesystem&directory=&recursive=``
  with ``maxResults`` and ``x-ms-continuation`` paging), delete (``recursive``, 409
  DirectoryNotEmpty);
* conditional headers If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since;
* authentication: SharedKey signatures verified for real, account SAS tokens verified for real
  (signature, expiry, protocol, permissions), bearer tokens only over https; failures are 403
  AuthenticationFailed / AuthorizationPermissionMismatch or 401 with a Bearer challenge.

Fault injection (:meth:`DfsServer.inject`): an HTTP status (503 ServerBusy, 429, 500, ...) with
an optional ``Retry-After``, a connection dropped halfway through the request body, a request
carried out whose answer is lost (connection closed instead), a bounded delay before answering,
a foreign file appearing at a rename destination (a conflict).

Everything the tests want to observe is recorded: ``requests`` (every call), ``renames`` (in
the order they happened), ``max_inflight`` per operation, and ``errors`` (bugs in this server;
the fixture asserts there are none).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import ipaddress
import json
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

MAX_DELAY = 10.0  #: upper bound for injected slow responses, seconds
SERVICE_VERSION = "2025-01-05"
BEARER_CHALLENGE = (
    "Bearer authorization_uri=https://login.microsoftonline.com/"
    "00000000-0000-0000-0000-000000000000/oauth2/authorize "
    "resource_id=https://storage.azure.com"
)

#: Error messages of the service, by code.
_MESSAGES = {
    "AuthenticationFailed": "Server failed to authenticate the request. Make sure the value of "
    "Authorization header is formed correctly including the signature.",
    "AuthorizationPermissionMismatch": "This request is not authorized to perform this "
    "operation using this permission.",
    "AuthorizationProtocolMismatch": "This request is not authorized to perform this operation "
    "using this protocol.",
    "InvalidAuthenticationInfo": "Server failed to authenticate the request. Please refer to "
    "the information in the www-authenticate header.",
    "NoAuthenticationInformation": "Server failed to authenticate the request. Please refer to "
    "the information in the www-authenticate header.",
    "FilesystemNotFound": "The specified filesystem does not exist.",
    "ContainerNotFound": "The specified container does not exist.",
    "FilesystemAlreadyExists": "The specified filesystem already exists.",
    "ContainerAlreadyExists": "The specified container already exists.",
    "PathNotFound": "The specified path does not exist.",
    "BlobNotFound": "The specified blob does not exist.",
    "PathAlreadyExists": "The specified path already exists.",
    "PathConflict": "The specified path, or an element of the path, exists and its resource "
    "type is invalid for this operation.",
    "SourcePathNotFound": "The source path for a rename operation does not exist.",
    "RenameDestinationParentPathNotFound": "The parent directory of the destination path does "
    "not exist.",
    "ConditionNotMet": "The condition specified using HTTP conditional header(s) is not met.",
    "SourceConditionNotMet": "The source condition specified using HTTP conditional header(s) "
    "is not met.",
    "DirectoryNotEmpty": "The recursive query parameter value must be true to delete a "
    "non-empty directory.",
    "InvalidFlushPosition": "The uploaded data is not contiguous or the position query "
    "parameter value is not equal to the length of the file after appending the uploaded data.",
    "InvalidRange": "The range specified is invalid for the current size of the resource.",
    "Md5Mismatch": "The MD5 value specified in the request did not match with the MD5 value "
    "calculated by the server.",
    "MissingRequiredQueryParameter": "A query parameter that's mandatory for this request is "
    "not specified.",
    "InvalidQueryParameterValue": "Value for one of the query parameters specified in the "
    "request URI is invalid.",
    "UnsupportedOperation": "The test server does not implement this operation.",
    "ServerBusy": "The server is busy.",
    "TooManyRequests": "The request is being throttled.",
    "InternalError": "The server encountered an internal error. Please retry the request.",
    "OperationTimedOut": "The operation could not be completed within the permitted time.",
}
_DEFAULT_CODES = {408: "OperationTimedOut", 429: "TooManyRequests", 500: "InternalError",
                  503: "ServerBusy"}
#: Operations answered the Blob way (the SDK sends them to the blob endpoint).
_BLOB_OPS = {"head", "read", "fs_props"}
#: Account SAS permission letters each operation needs (any of them).
_SAS_PERMISSIONS = {
    "create_fs": "c", "delete_fs": "d", "fs_props": "r", "list": "l", "create": "cw",
    "append": "aw", "flush": "w", "rename": "w", "head": "r", "read": "r", "delete": "d",
}


class DfsError(Exception):
    """An error answer: status, service error code, extra headers."""

    def __init__(self, status: int, code: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.headers = headers or {}


@dataclass
class Node:
    kind: str  #: "file" or "directory"
    etag: str
    last_modified: float
    created: float
    data: bytearray = field(default_factory=bytearray)
    uncommitted: dict[int, bytes] = field(default_factory=dict)
    content_md5: str | None = None


@dataclass
class FileSystem:
    name: str
    etag: str
    last_modified: float
    paths: dict[str, Node] = field(default_factory=dict)


@dataclass
class Fault:
    """One injected fault; fires on the ``nth`` matching request, ``times`` times (None: always)."""

    op: str
    status: int | None = None
    error_code: str | None = None
    retry_after: str | None = None
    drop: bool = False  #: close the connection halfway through the request body
    drop_response: bool = False  #: carry the request out, then close instead of answering
    delay: float = 0.0
    conflict: bool = False
    nth: int = 1
    times: int | None = 1
    path_contains: str | None = None
    seen: int = 0
    fired: int = 0


@dataclass(frozen=True)
class Request:
    op: str
    method: str
    filesystem: str | None
    path: str
    status: int
    auth: str  #: "sharedkey", "sas", "bearer" or "anonymous"
    query: dict[str, str]


class DfsServer:
    """The server, its state, its fault switches and its records."""

    def __init__(
        self,
        account: str = "devacct",
        account_key: str | None = None,
        *,
        tls: bool = False,
        bearer_tokens: tuple[str, ...] = (),
        page_size: int = 5000,
        allow_anonymous: bool = False,
    ) -> None:
        self.account = account
        self.account_key = account_key or base64.b64encode(os.urandom(64)).decode()
        self.tls = tls
        self.bearer_tokens = set(bearer_tokens)
        self.page_size = page_size
        self.allow_anonymous = allow_anonymous
        self.filesystems: dict[str, FileSystem] = {}
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.renames: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.inflight: dict[str, int] = defaultdict(int)
        self.max_inflight: dict[str, int] = defaultdict(int)
        self.lock = threading.RLock()
        self._etag_counter = int(time.time() * 1000)
        self._tmpdir: str | None = None
        self.ca_path: str | None = None
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> DfsServer:
        httpd = _HttpServer(("127.0.0.1", 0), _Handler)
        httpd.dfs = self
        if self.tls:
            self._tmpdir = tempfile.mkdtemp(prefix="dfs-tls-")
            self.ca_path, cert, key = make_certificate(self._tmpdir)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
            httpd.socket = context.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name="dfs-server",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> DfsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def account_url(self) -> str:
        """``http(s)://127.0.0.1:<port>/<account>`` — what the SDK clients take."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/{self.account}"

    def url(self, filesystem: str, path: str = "") -> str:
        """A path-style landing URL for ``filesystem``/``path``."""
        return f"{self.account_url}/{filesystem}/{path}".rstrip("/")

    # -- direct state access for tests -----------------------------------------------------

    def create_filesystem(self, name: str) -> None:
        with self.lock:
            self.filesystems.setdefault(name, FileSystem(name, self.new_etag(), time.time()))

    def put_file(self, filesystem: str, path: str, data: bytes) -> None:
        """Write a committed file directly (a foreign writer)."""
        with self.lock:
            fs = self.filesystems[filesystem]
            path = path.strip("/")
            _ensure_parents(self, fs, path)
            now = time.time()
            fs.paths[path] = Node("file", self.new_etag(), now, now, bytearray(data))

    def move_file(self, filesystem: str, source: str, destination: str) -> None:
        """Move a committed file (what the mirroring service does with processed files)."""
        with self.lock:
            fs = self.filesystems[filesystem]
            source, destination = source.strip("/"), destination.strip("/")
            node = fs.paths.pop(source)
            _ensure_parents(self, fs, destination)
            fs.paths[destination] = node

    def read_file(self, filesystem: str, path: str) -> bytes | None:
        with self.lock:
            node = self.filesystems[filesystem].paths.get(path.strip("/"))
            return bytes(node.data) if node is not None and node.kind == "file" else None

    def names(self, filesystem: str, folder: str = "") -> list[str]:
        """Base names directly in ``folder`` (files and directories)."""
        with self.lock:
            fs = self.filesystems[filesystem]
            return [p.rsplit("/", 1)[-1] for p in _children(fs, folder.strip("/"), False)]

    def inject(self, op: str, **kwargs: object) -> Fault:
        """Add a fault for operation ``op`` (create, append, flush, rename, head, read, list,
        delete, ...); see :class:`Fault` for the switches."""
        fault = Fault(op=op, **kwargs)  # type: ignore[arg-type]
        if fault.delay > MAX_DELAY:
            raise ValueError(f"delay is bounded to {MAX_DELAY}s")
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def count(self, op: str, status: int | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.op == op and status in (None, r.status))

    # -- internals -------------------------------------------------------------------------

    def new_etag(self) -> str:
        with self.lock:
            self._etag_counter += 1
            return f'"0x8D{self._etag_counter:013X}"'

    def _pick_fault(self, op: str, path: str) -> Fault | None:
        """The first matching fault due now; every matching fault counts the request."""
        chosen = None
        with self.lock:
            for fault in self.faults:
                if fault.op != op or (fault.path_contains and fault.path_contains not in path):
                    continue
                fault.seen += 1
                due = fault.seen >= fault.nth and (fault.times is None or fault.fired < fault.times)
                if chosen is None and due:
                    fault.fired += 1
                    chosen = fault
        return chosen


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    dfs: DfsServer

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (OSError, ssl.SSLError, TimeoutError)):
            return  # the client went away (timeouts, dropped connections): not a server bug
        self.dfs.errors.append(traceback.format_exc())


# ------------------------------------------------------------------------------------------
# Request handling


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "diffcdc-test-dfs/1.0"
    timeout = 15  # idle keep-alive connections end after this many seconds
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    # -- plumbing --------------------------------------------------------------------------

    @property
    def dfs(self) -> DfsServer:
        return self.server.dfs

    def _dispatch(self) -> None:
        self.request_id = str(uuid.uuid4())
        raw_path, _, raw_query = self.path.partition("?")
        self.raw_path = raw_path
        self.query = _parse_query(raw_query)
        segments = [unquote(s) for s in raw_path.split("/")[1:]]
        account = segments[0] if segments else ""
        self.fs_name = segments[1] if len(segments) > 1 and segments[1] else None
        self.path_name = "/".join(segments[2:]).strip("/")
        self.op = _classify(self.command, self.query, self.headers, self.fs_name, self.path_name)
        self.auth_kind = "anonymous"
        self.status = 0
        self._body: bytes | None = None
        self._drop_response = False
        self._tracked = False
        self._recorded = False
        try:
            if account != self.dfs.account:
                raise DfsError(404, "ResourceNotFound")
            self._authenticate()
            with self.dfs.lock:
                self.dfs.inflight[self.op] += 1
                self.dfs.max_inflight[self.op] = max(self.dfs.max_inflight[self.op],
                                                     self.dfs.inflight[self.op])
                self._tracked = True
            fault = self.dfs._pick_fault(self.op, self.path_name)
            if fault is not None and self._apply_fault(fault):
                return
            handler = getattr(self, f"_op_{self.op}", None)
            if handler is None:
                raise DfsError(400, "UnsupportedOperation")
            handler()
        except DfsError as err:
            self._read_body()
            self._send_error(err)
        except (OSError, ssl.SSLError):
            self.close_connection = True
            raise
        except Exception:  # a bug in this server: record it, answer 500 without a retry storm
            self.dfs.errors.append(traceback.format_exc())
            self._read_body()
            self._send_error(DfsError(500, "TestServerBug"))
        finally:
            self._done()

    def _done(self) -> None:
        """Record the request and end its in-flight count, once.

        Called before the answer is written, so a client that has its answer (and sends the
        next request) always finds this one recorded and no longer in flight.
        """
        with self.dfs.lock:
            if self._tracked:
                self.dfs.inflight[self.op] -= 1
                self._tracked = False
            if not self._recorded:
                self._recorded = True
                self.dfs.requests.append(
                    Request(self.op, self.command, self.fs_name, self.path_name, self.status,
                            self.auth_kind, dict(self.query))
                )

    def _read_body(self) -> bytes:
        if self._body is not None:
            return self._body
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self._body = b"".join(chunks)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(length) if length else b""
        return self._body

    def _send(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"",
              content_length: int | None = None) -> None:
        self.status = status
        if self._drop_response:  # the work is done, the answer is lost
            self.status = -status
            self._done()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self._done()
        self.send_response(status)  # sends Server and Date
        out = {
            "x-ms-request-id": self.request_id,
            "x-ms-version": self.headers.get("x-ms-version") or SERVICE_VERSION,
        }
        if self.headers.get("x-ms-client-request-id"):
            out["x-ms-client-request-id"] = self.headers["x-ms-client-request-id"]
        out.update(headers or {})
        out["Content-Length"] = str(len(body) if content_length is None else content_length)
        for name, value in out.items():
            self.send_header(name, value)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _send_error(self, err: DfsError) -> None:
        message = _MESSAGES.get(err.code, err.code)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f0Z")
        full = f"{message}\nRequestId:{self.request_id}\nTime:{stamp}"
        headers = {"x-ms-error-code": err.code, **err.headers}
        if self.command == "HEAD" or err.status == 304:
            body = b""
        elif self.op in _BLOB_OPS or "restype" in self.query:
            headers["Content-Type"] = "application/xml"
            body = (
                '<?xml version="1.0" encoding="utf-8"?><Error><Code>'
                f"{err.code}</Code><Message>{_xml_escape(full)}</Message></Error>"
            ).encode()
        else:
            headers["Content-Type"] = "application/json;charset=utf-8"
            body = json.dumps({"error": {"code": err.code, "message": full}}).encode()
        self._send(err.status, headers, body)

    def _apply_fault(self, fault: Fault) -> bool:
        """Act on an injected fault; True when the request is finished."""
        if fault.delay:
            time.sleep(min(fault.delay, MAX_DELAY))
        if fault.drop:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(max(1, length // 2))
            self.close_connection = True
            self.status = -1
            self._done()
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        if fault.drop_response:
            self._drop_response = True
        if fault.conflict and self.op == "rename" and self.fs_name:
            self.dfs.put_file(self.fs_name, self.path_name, b"written by someone else")
        if fault.status:
            code = fault.error_code or _DEFAULT_CODES.get(fault.status, "InternalError")
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            raise DfsError(fault.status, code, headers)
        return False

    # -- authentication --------------------------------------------------------------------

    def _authenticate(self) -> None:
        auth = self.headers.get("Authorization", "")
        if "sig" in self.query:
            self.auth_kind = "sas"
            self._check_sas(self.query, self.op)
        elif auth.startswith("SharedKey "):
            self.auth_kind = "sharedkey"
            self._check_shared_key(auth[len("SharedKey "):])
        elif auth.startswith("Bearer "):
            self.auth_kind = "bearer"
            if not self.dfs.tls:
                raise DfsError(403, "AuthenticationFailed")
            if auth[len("Bearer "):].strip() not in self.dfs.bearer_tokens:
                raise DfsError(401, "InvalidAuthenticationInfo",
                               {"WWW-Authenticate": BEARER_CHALLENGE})
        elif not self.dfs.allow_anonymous:
            raise DfsError(401, "NoAuthenticationInformation",
                           {"WWW-Authenticate": BEARER_CHALLENGE})

    def _check_shared_key(self, credential: str) -> None:
        account, _, signature = credential.partition(":")
        if account != self.dfs.account or not signature:
            raise DfsError(403, "AuthenticationFailed")
        if not self.headers.get("x-ms-date") and not self.headers.get("Date"):
            raise DfsError(403, "AuthenticationFailed")
        expected = _sign(self.dfs.account_key, self._string_to_sign())
        if not hmac.compare_digest(expected, signature):
            raise DfsError(403, "AuthenticationFailed")

    def _string_to_sign(self) -> str:
        """The SharedKey string to sign (Blob/Queue/File/DFS services, version 2009-09-19+)."""
        h = self.headers

        def header(name: str) -> str:
            return h.get(name) or ""

        length = header("Content-Length")
        standard = [
            self.command,
            header("Content-Encoding"),
            header("Content-Language"),
            "" if length == "0" else length,
            header("Content-MD5"),
            header("Content-Type"),
            header("Date"),
            header("If-Modified-Since"),
            header("If-Match"),
            header("If-None-Match"),
            header("If-Unmodified-Since"),
            header("Range"),
        ]
        ms_headers = sorted(
            ((n.lower(), v) for n, v in h.items() if n.lower().startswith("x-ms-")),
            key=lambda kv: (kv[0].replace("-", ""), kv[0]),
        )
        canonical_headers = "".join(f"{name}:{value}\n" for name, value in ms_headers)
        resource = f"/{self.dfs.account}{self.raw_path}"
        for name in sorted(self.query, key=str.lower):
            resource += f"\n{name.lower()}:{self.query[name]}"
        return "\n".join(standard) + "\n" + canonical_headers + resource

    def _check_sas(self, query: dict[str, str], op: str) -> None:
        """Verify an account SAS: signature, time window, protocol, services, permissions."""
        if "ss" not in query or "srt" not in query:
            raise DfsError(403, "AuthenticationFailed")  # only account SAS is implemented
        fields = [self.dfs.account, query.get("sp", ""), query.get("ss", ""),
                  query.get("srt", ""), query.get("st", ""), query.get("se", ""),
                  query.get("sip", ""), query.get("spr", ""), query.get("sv", "")]
        if query.get("sv", "") >= "2020-12-06":
            fields.append(query.get("ses", ""))
        expected = _sign(self.dfs.account_key, "\n".join(fields) + "\n")
        if not hmac.compare_digest(expected, query.get("sig", "")):
            raise DfsError(403, "AuthenticationFailed")
        now = dt.datetime.now(dt.timezone.utc)
        if _iso(query.get("se")) is None or _iso(query["se"]) < now:  # type: ignore[operator]
            raise DfsError(403, "AuthenticationFailed")
        start = _iso(query.get("st"))
        if start is not None and start > now + dt.timedelta(minutes=1):
            raise DfsError(403, "AuthenticationFailed")
        if query.get("spr") == "https" and not self.dfs.tls:
            raise DfsError(403, "AuthorizationProtocolMismatch")
        if "b" not in query.get("ss", ""):
            raise DfsError(403, "AuthorizationPermissionMismatch")
        needed = _SAS_PERMISSIONS.get(op)
        if needed and not any(letter in query.get("sp", "") for letter in needed):
            raise DfsError(403, "AuthorizationPermissionMismatch")

    # -- filesystems -----------------------------------------------------------------------

    def _filesystem(self) -> FileSystem:
        fs = self.dfs.filesystems.get(self.fs_name or "")
        if fs is None:
            blob = self.op in _BLOB_OPS or "restype" in self.query
            raise DfsError(404, "ContainerNotFound" if blob else "FilesystemNotFound")
        return fs

    def _op_create_fs(self) -> None:
        self._read_body()
        with self.dfs.lock:
            if self.fs_name in self.dfs.filesystems:
                blob = "restype" in self.query
                raise DfsError(409, "ContainerAlreadyExists" if blob else "FilesystemAlreadyExists")
            self.dfs.create_filesystem(self.fs_name or "")
            fs = self.dfs.filesystems[self.fs_name or ""]
        self._send(201, {"ETag": fs.etag, "Last-Modified": _http_date(fs.last_modified)})

    def _op_delete_fs(self) -> None:
        with self.dfs.lock:
            self._filesystem()
            del self.dfs.filesystems[self.fs_name or ""]
        self._send(202)

    def _op_fs_props(self) -> None:
        with self.dfs.lock:
            fs = self._filesystem()
            headers = {"ETag": fs.etag, "Last-Modified": _http_date(fs.last_modified),
                       "x-ms-lease-status": "unlocked", "x-ms-lease-state": "available",
                       "x-ms-has-immutability-policy": "false", "x-ms-has-legal-hold": "false"}
        self._send(200, headers)

    # -- paths -----------------------------------------------------------------------------

    def _node(self, fs: FileSystem, path: str, missing: str = "PathNotFound") -> Node:
        node = fs.paths.get(path)
        if node is None:
            raise DfsError(404, missing)
        return node

    def _check_conditions(self, node: Node | None, read: bool = False) -> None:
        h = self.headers
        if_match = h.get("If-Match")
        if if_match and (node is None or (if_match != "*" and if_match != node.etag)):
            raise DfsError(412, "ConditionNotMet")
        if_none_match = h.get("If-None-Match")
        if if_none_match and node is not None and if_none_match in ("*", node.etag):
            if read:
                raise DfsError(304, "ConditionNotMet")
            raise DfsError(409 if if_none_match == "*" else 412,
                           "PathAlreadyExists" if if_none_match == "*" else "ConditionNotMet")
        since = _http_time(h.get("If-Modified-Since"))
        if since is not None and node is not None and int(node.last_modified) <= since:
            raise DfsError(304 if read else 412, "ConditionNotMet")
        until = _http_time(h.get("If-Unmodified-Since"))
        if until is not None and node is not None and int(node.last_modified) > until:
            raise DfsError(412, "ConditionNotMet")

    def _op_create(self) -> None:
        self._read_body()
        kind = "directory" if self.query.get("resource") == "directory" else "file"
        with self.dfs.lock:
            fs = self._filesystem()
            path = self.path_name
            existing = fs.paths.get(path)
            self._check_conditions(existing)
            if existing is not None and existing.kind != kind:
                raise DfsError(409, "PathConflict")
            _ensure_parents(self.dfs, fs, path)
            now = time.time()
            if existing is not None and kind == "directory":
                existing.etag, existing.last_modified = self.dfs.new_etag(), now
                node = existing
            else:
                node = Node(kind, self.dfs.new_etag(), now, now)
                fs.paths[path] = node
            headers = {"ETag": node.etag, "Last-Modified": _http_date(node.last_modified),
                       "x-ms-request-server-encrypted": "true"}
        self._send(201, headers)

    def _op_append(self) -> None:
        body = self._read_body()
        position = _int_param(self.query, "position")
        md5 = self.headers.get("Content-MD5")
        if md5 and base64.b64encode(hashlib.md5(body).digest()).decode() != md5:
            raise DfsError(400, "Md5Mismatch")
        with self.dfs.lock:
            node = self._node(self._filesystem(), self.path_name)
            if node.kind != "file":
                raise DfsError(409, "PathConflict")
            if position < len(node.data):
                raise DfsError(400, "InvalidFlushPosition")
            node.uncommitted[position] = body
            if self.query.get("flush") == "true":
                self._commit(node, position + len(body))
        self._send(202, {"x-ms-request-server-encrypted": "true"})

    def _op_flush(self) -> None:
        self._read_body()
        position = _int_param(self.query, "position")
        with self.dfs.lock:
            node = self._node(self._filesystem(), self.path_name)
            if node.kind != "file":
                raise DfsError(409, "PathConflict")
            self._check_conditions(node)
            self._commit(node, position)
            if self.headers.get("x-ms-content-md5"):
                node.content_md5 = self.headers["x-ms-content-md5"]
            headers = {"ETag": node.etag, "Last-Modified": _http_date(node.last_modified),
                       "x-ms-request-server-encrypted": "true"}
        self._send(200, headers)

    def _commit(self, node: Node, position: int) -> None:
        data = bytearray(node.data)
        while len(data) < position:
            chunk = node.uncommitted.get(len(data))
            if chunk is None or not chunk:
                raise DfsError(400, "InvalidFlushPosition")
            data += chunk
        if len(data) != position:
            raise DfsError(400, "InvalidFlushPosition")
        if position != len(node.data) or node.uncommitted:
            node.data = data
            node.etag, node.last_modified = self.dfs.new_etag(), time.time()
        if self.query.get("retainUncommittedData") != "true":
            node.uncommitted.clear()

    def _op_rename(self) -> None:
        self._read_body()
        source = self.headers["x-ms-rename-source"]
        source_path, _, source_query = source.partition("?")
        parsed = _parse_query(source_query)
        if "sig" in parsed:
            self._check_sas(parsed, "delete")
        parts = [unquote(s) for s in source_path.split("/") if s]
        if not parts:
            raise DfsError(400, "InvalidSourceUri")
        src_fs_name, src = parts[0], "/".join(parts[1:])
        with self.dfs.lock:
            fs = self._filesystem()
            src_fs = self.dfs.filesystems.get(src_fs_name)
            if src_fs is None or src not in src_fs.paths:
                raise DfsError(404, "SourcePathNotFound")
            src_node = src_fs.paths[src]
            self._check_source_conditions(src_node)
            dest = self.path_name
            self._check_conditions(fs.paths.get(dest))
            parent = dest.rpartition("/")[0]
            if parent and (parent not in fs.paths or fs.paths[parent].kind != "directory"):
                raise DfsError(404, "RenameDestinationParentPathNotFound")
            existing = fs.paths.get(dest)
            if existing is not None and (existing.kind == "directory" or src_node.kind != "file"):
                raise DfsError(409, "PathConflict")
            moved = {src: src_node}
            if src_node.kind == "directory":
                moved.update({p: n for p, n in src_fs.paths.items() if p.startswith(src + "/")})
            for old in moved:
                del src_fs.paths[old]
            for old, node in moved.items():
                fs.paths[dest + old[len(src):]] = node
            self.dfs.renames.append((f"{src_fs_name}/{src}", f"{fs.name}/{dest}"))
            headers = {"ETag": src_node.etag, "Last-Modified": _http_date(src_node.last_modified)}
        self._send(201, headers)

    def _check_source_conditions(self, node: Node) -> None:
        h = self.headers
        if h.get("x-ms-source-if-match") and h["x-ms-source-if-match"] not in ("*", node.etag):
            raise DfsError(412, "SourceConditionNotMet")
        if h.get("x-ms-source-if-none-match") in ("*", node.etag):
            raise DfsError(412, "SourceConditionNotMet")
        since = _http_time(h.get("x-ms-source-if-modified-since"))
        if since is not None and int(node.last_modified) <= since:
            raise DfsError(412, "SourceConditionNotMet")
        until = _http_time(h.get("x-ms-source-if-unmodified-since"))
        if until is not None and int(node.last_modified) > until:
            raise DfsError(412, "SourceConditionNotMet")

    def _properties(self, node: Node) -> dict[str, str]:
        headers = {
            "ETag": node.etag,
            "Last-Modified": _http_date(node.last_modified),
            "x-ms-creation-time": _http_date(node.created),
            "x-ms-resource-type": node.kind,
            "x-ms-blob-type": "BlockBlob",
            "x-ms-lease-status": "unlocked",
            "x-ms-lease-state": "available",
            "x-ms-server-encrypted": "true",
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if node.kind == "directory":
            headers["x-ms-meta-hdi_isfolder"] = "true"
        return headers

    def _op_head(self) -> None:
        with self.dfs.lock:
            node = self._node(self._filesystem(), self.path_name, "BlobNotFound")
            self._check_conditions(node, read=True)
            headers = self._properties(node)
            if node.content_md5:
                headers["Content-MD5"] = node.content_md5
            size = len(node.data)
        self._send(200, headers, content_length=size)

    def _op_read(self) -> None:
        with self.dfs.lock:
            node = self._node(self._filesystem(), self.path_name, "BlobNotFound")
            self._check_conditions(node, read=True)
            data = bytes(node.data)
            headers = self._properties(node)
            md5 = node.content_md5
        spec = self.headers.get("x-ms-range") or self.headers.get("Range")
        if not spec:
            if md5:
                headers["Content-MD5"] = md5
            self._send(200, headers, data)
            return
        start, end = _parse_range(spec)
        if start >= len(data):
            raise DfsError(416, "InvalidRange", {"Content-Range": f"bytes */{len(data)}"})
        end = len(data) - 1 if end is None else min(end, len(data) - 1)
        part = data[start:end + 1]
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        if md5:
            headers["x-ms-blob-content-md5"] = md5
        if self.headers.get("x-ms-range-get-content-md5") == "true":
            headers["Content-MD5"] = base64.b64encode(hashlib.md5(part).digest()).decode()
        self._send(206, headers, part)

    def _op_delete(self) -> None:
        with self.dfs.lock:
            fs = self._filesystem()
            path = self.path_name
            node = self._node(fs, path)
            self._check_conditions(node)
            below = [p for p in fs.paths if p.startswith(path + "/")]
            if below and self.query.get("recursive") != "true":
                raise DfsError(409, "DirectoryNotEmpty")
            for p in [path, *below]:
                del fs.paths[p]
        self._send(200)

    def _op_list(self) -> None:
        if "recursive" not in self.query:
            raise DfsError(400, "MissingRequiredQueryParameter")
        recursive = self.query["recursive"] == "true"
        directory = self.query.get("directory", "").strip("/")
        limit = min(5000, self.dfs.page_size, _int_param(self.query, "maxResults", 5000))
        if limit < 1:
            raise DfsError(400, "InvalidQueryParameterValue")
        token = self.query.get("continuation")
        after = base64.urlsafe_b64decode(token.encode()).decode() if token else None
        with self.dfs.lock:
            fs = self._filesystem()
            if directory and (directory not in fs.paths or fs.paths[directory].kind != "directory"):
                raise DfsError(404, "PathNotFound")
            names = _children(fs, directory, recursive)
            if after is not None:
                names = [n for n in names if n > after]
            page, more = names[:limit], len(names) > limit
            entries = [_list_entry(n, fs.paths[n]) for n in page]
        headers = {"Content-Type": "application/json;charset=utf-8"}
        if more:
            headers["x-ms-continuation"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
        self._send(200, headers, json.dumps({"paths": entries}).encode())


# ------------------------------------------------------------------------------------------
# Helpers


def _classify(method: str, query: dict[str, str], headers: object, fs: str | None,
              path: str) -> str:
    resource = query.get("resource")
    if fs is None:
        return "account"
    if not path:
        if method == "PUT" and (query.get("restype") == "container" or resource == "filesystem"):
            return "create_fs"
        if method == "DELETE" and (query.get("restype") == "container" or resource == "filesystem"):
            return "delete_fs"
        if method == "GET" and resource == "filesystem":
            return "list"
        if method in ("GET", "HEAD") and (
            (query.get("restype") == "container" and "comp" not in query)
            or resource == "filesystem"
        ):
            return "fs_props"
        return "unsupported"
    if method == "PUT" and headers.get("x-ms-rename-source"):  # type: ignore[attr-defined]
        return "rename"
    if method == "PUT" and resource in ("file", "directory"):
        return "create"
    if method == "PATCH":
        return {"append": "append", "flush": "flush"}.get(query.get("action", ""), "unsupported")
    if method == "HEAD" and not query.get("comp"):
        return "head"
    if method == "GET" and not query.get("comp"):
        return "read"
    if method == "DELETE":
        return "delete"
    return "unsupported"


def _parse_query(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in raw.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        out[unquote(name)] = unquote(value)
    return out


def _int_param(query: dict[str, str], name: str, default: int | None = None) -> int:
    value = query.get(name)
    if value is None:
        if default is None:
            raise DfsError(400, "MissingRequiredQueryParameter")
        return default
    try:
        return int(value)
    except ValueError:
        raise DfsError(400, "InvalidQueryParameterValue") from None


def _parse_range(spec: str) -> tuple[int, int | None]:
    try:
        unit, _, span = spec.partition("=")
        first, _, last = span.partition("-")
        if unit.strip() != "bytes" or not first:
            raise ValueError(spec)
        return int(first), int(last) if last else None
    except ValueError:
        raise DfsError(400, "InvalidRange") from None


def _sign(key_b64: str, text: str) -> str:
    digest = hmac.new(base64.b64decode(key_b64), text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _iso(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise DfsError(403, "AuthenticationFailed") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def _http_date(ts: float) -> str:
    return formatdate(ts, usegmt=True)


def _http_time(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError):
        return None


def _filetime(ts: float) -> str:
    return str(int((ts + 11644473600) * 10_000_000))


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _ensure_parents(dfs: DfsServer, fs: FileSystem, path: str) -> None:
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        parent = "/".join(parts[:i])
        node = fs.paths.get(parent)
        if node is None:
            now = time.time()
            fs.paths[parent] = Node("directory", dfs.new_etag(), now, now)
        elif node.kind != "directory":
            raise DfsError(409, "PathConflict")


def _children(fs: FileSystem, directory: str, recursive: bool) -> list[str]:
    prefix = directory + "/" if directory else ""
    out = []
    for name in fs.paths:
        if not name.startswith(prefix) or name == directory:
            continue
        if recursive or "/" not in name[len(prefix):]:
            out.append(name)
    return sorted(out)


def _list_entry(name: str, node: Node) -> dict[str, str]:
    entry = {
        "name": name,
        "contentLength": str(len(node.data)),
        "lastModified": _http_date(node.last_modified),
        "etag": node.etag.strip('"'),
        "owner": "$superuser",
        "group": "$superuser",
        "permissions": "rwxr-x---" if node.kind == "directory" else "rw-r-----",
        "creationTime": _filetime(node.created),
    }
    if node.kind == "directory":
        entry["isDirectory"] = "true"
    return entry


def make_certificate(directory: str) -> tuple[str, str, str]:
    """A throw-away CA and a server certificate for 127.0.0.1 signed by it.

    Returns (CA bundle path for ``connection_verify``, server cert path, server key path).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "diffcdc test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, encipher_only=False,
                          decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = os.path.join(directory, "ca.pem")
    cert_path = os.path.join(directory, "server.pem")
    key_path = os.path.join(directory, "server.key")
    with open(ca_path, "wb") as handle:
        handle.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    with open(cert_path, "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as handle:
        handle.write(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
        )
    return ca_path, cert_path, key_path


__all__ = ["DfsServer", "Fault", "Request", "make_certificate"]
