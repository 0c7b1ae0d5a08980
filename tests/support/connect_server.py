"""A real Spark Connect server in a process of its own, from the pip-installed pyspark, and
clients that cannot start a JVM.

``ConnectServer`` runs ``spark-submit --class org.apache.spark.sql.connect.service.
SparkConnectServer --master local[2]`` (the wheel ships the server's jar) on a free 127.0.0.1
port and waits until it answers. Its Python workers run the test process's interpreter with
this checkout on ``PYTHONPATH`` (a server whose executors import diffcdc, as a cluster that
runs diffcdc's tasks needs). ``stop`` ends it and is safe to call twice.

:func:`client_env` is the environment of a client process as one runs on Databricks serverless
or beside ``databricks-connect``: no Java on ``PATH``, no ``JAVA_HOME`` or ``SPARK_HOME`` — a
classic SparkContext cannot start there, so any JVM call diffcdc makes on that path fails the
test instead of being answered by a hidden local JVM (as ``.remote("local")`` would).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

from tests.support.kafka_broker import free_port
from tests.support.postgres_server import JDBC_JAR
from tests.support.spark_cluster import java_binary, spark_home

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServer:
    """One Spark Connect server (``local[2]``) on 127.0.0.1, its log under ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log_path = os.path.join(folder, "connect-server.log")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> None:
        home = spark_home()
        java = java_binary()
        submit = os.path.join(home, "bin", "spark-submit")
        command = [submit] if os.access(submit, os.X_OK) else ["bash", submit]
        jars = [JDBC_JAR] if os.path.exists(JDBC_JAR) else []
        command += [
            "--class", SERVER_CLASS, "--master", "local[2]", "--name", "diffcdc-tests-connect",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2",
            # progress reports every 200 ms (default 2 s): a job of a few seconds shows them
            "--conf", "spark.connect.progress.reportInterval=200ms",
            "--conf", "spark.driver.extraJavaOptions=-XX:+UseParallelGC",
            *(["--jars", ",".join(jars)] if jars else []),
            "spark-internal",
        ]
        env = {
            **os.environ,
            "SPARK_HOME": home,
            "JAVA_HOME": os.path.dirname(os.path.dirname(os.path.realpath(java))),
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": self.folder,
        }
        env.pop("SPARK_REMOTE", None)
        os.makedirs(self.folder, exist_ok=True)
        offset = len(self._log_bytes())  # a restart appends to the log of the last start
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, cwd=self.folder, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited ({self._process.returncode})"
                                   f":\n{self.log_tail()}")
            if b"Spark Connect server started" in self._log_bytes()[offset:] and self._answers():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the Spark Connect server did not start in {timeout:.0f} s:\n"
                           f"{self.log_tail()}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def _log_bytes(self) -> bytes:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self._log_bytes().decode("utf-8", "replace").splitlines()[-lines:])

    def running_jobs(self) -> set[int]:
        """The Spark jobs the server's log shows started and not yet ended (a killed client's
        orphaned job stays among them until it finishes)."""
        text = self._log_bytes().decode("utf-8", "replace")
        started = {int(j) for j in re.findall(r"DAGScheduler: Got job (\d+)", text)}
        ended = {int(j) for j in re.findall(r"DAGScheduler: Job (\d+) (?:is finished|failed)", text)}
        return started - ended

    def kill(self) -> None:
        """End the server as ``kill -9`` does (no shutdown, sockets reset by the kernel)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def pause(self) -> None:
        """Stop the server's processes (SIGSTOP): its sockets stay open, nothing answers."""
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT)."""
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGCONT)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGCONT)  # a paused server cannot stop
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def client_env(folder: str, **extra: str) -> dict[str, str]:
    """The environment of a client process that has no Java (see the module docstring)."""
    empty = os.path.join(folder, "no-java-bin")
    os.makedirs(empty, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAVA_HOME", "SPARK_HOME", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
                        "SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS")}
    env["PATH"] = empty
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env.update(extra)
    return env
