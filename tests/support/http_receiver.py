"""A small HTTP receiver on 127.0.0.1 (a free port) that keeps every request it gets: the
OpenLineage receiver and the Pushgateway of the lineage and metrics tests."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One request: its method, path, headers and body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        data = self.body
        if self.headers.get("content-encoding", "").lower() == "gzip":
            data = gzip.decompress(data)
        return json.loads(data)


@dataclass
class Receiver:
    """A running receiver: its URL and what it got so far."""

    url: str
    requests: list[Received] = field(default_factory=list)

    def lineage_events(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.requests if r.path.endswith("/api/v1/lineage")]


def start_receiver() -> tuple[Receiver, ThreadingHTTPServer]:
    """A receiver answering 200 to every POST and PUT (stop it with ``server.shutdown()``)."""
    got: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def _take(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            got.append(Received(self.command, self.path,
                                {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        do_POST = do_PUT = _take

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}", got)
    return receiver, server


def closed_port_url() -> str:
    """The URL of a port on 127.0.0.1 nothing listens on (a receiver that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
