"""A real Spark standalone cluster from the pip-installed pyspark, on loopback.

``StandaloneCluster`` starts a master and one worker as two separate JVMs with
``$SPARK_HOME/bin/spark-class`` (``SPARK_HOME`` = pyspark's package folder), each on free
127.0.0.1 ports, and waits until the worker has registered with the master (the master's
``/json/`` page lists it as alive). Applications then run with ``--master
spark://127.0.0.1:P``: their executors are further JVMs started by the worker, on this machine,
sharing its local disk with the driver. Logs (and the worker's scratch folder, which by default
would be ``$SPARK_HOME/work`` inside the installed package) go to one temp folder. ``stop``
ends both daemons (the worker takes its executors with it) and is safe to call twice.

Java is found as diffcdc (and spark-class) find it: ``$JAVA_HOME/bin/java``, else ``java`` on
``PATH``. Executors run Python tasks with the driver's ``PYSPARK_PYTHON`` (diffcdc sets it to
its own interpreter) and inherit the worker's environment (so ``PYTHONPATH``): the test
process's interpreter and code on both sides, as a real cluster needs them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass

from tests.support.kafka_broker import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> str:
    """pyspark's package folder, which holds ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def spark_class_command(home: str) -> list[str]:
    """How to call ``bin/spark-class``: directly, or through bash when the install lost its
    executable bit (some wheels/unpackers do)."""
    script = os.path.join(home, "bin", "spark-class")
    if not os.path.isfile(script):
        raise RuntimeError(f"{script} is missing: this pyspark install cannot start a cluster")
    return [script] if os.access(script, os.X_OK) else ["bash", script]


def java_binary() -> str:
    """The Java diffcdc would use; fails with what to do when there is none."""
    from diffcdc.cds import _java

    java = _java()
    if java is None:
        raise RuntimeError("no Java found (JAVA_HOME or java on PATH): run `bash .ci/install`")
    return java


@dataclass(frozen=True)
class ClusterApp:
    """One application as the master lists it."""

    app_id: str
    name: str
    state: str


class StandaloneCluster:
    """A master and one worker on 127.0.0.1, logs and scratch under ``folder``."""

    def __init__(self, folder: str, cores: int = 2, memory: str = "3g") -> None:
        self.folder = folder
        self.cores = cores
        self.memory = memory
        self.home = spark_home()
        self.command = spark_class_command(self.home)
        self.java = java_binary()
        self.port = free_port()
        self.master_ui = free_port()
        self.worker_ui = free_port()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def log_path(self, role: str) -> str:
        return os.path.join(self.folder, f"{role}.log")

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(SPARK_HOME=self.home, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
                   SPARK_LOG_DIR=self.folder)
        env.setdefault("JAVA_HOME", os.path.dirname(os.path.dirname(self.java)))
        return env

    def start(self, timeout: float = 180.0) -> None:
        """Start master and worker; return once the worker is registered (else stop, raise)."""
        os.makedirs(self.folder, exist_ok=True)
        work = os.path.join(self.folder, "work")
        try:
            self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                                   "--webui-port", str(self.master_ui)])
            self._spawn("worker", [WORKER_CLASS, self.master_url, "--cores", str(self.cores),
                                   "--memory", self.memory, "--host", "127.0.0.1",
                                   "--webui-port", str(self.worker_ui), "--work-dir", work])
            self._wait_for_worker(timeout)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, role: str, args: list[str]) -> None:
        with open(self.log_path(role), "ab") as log:
            self._procs[role] = subprocess.Popen(
                [*self.command, *args], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.environment(), start_new_session=True,
            )

    def _wait_for_worker(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for role, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"the Spark {role} exited with {proc.returncode}; see {self.log_path(role)}")
            try:
                if self.status().get("aliveworkers", 0) >= 1:
                    return
            except (OSError, ValueError):
                pass  # the master's web UI is not up yet (no answer, or a page that is not JSON)
            time.sleep(0.25)
        raise RuntimeError(f"no Spark worker registered with {self.master_url} within {timeout} s; "
                           f"see {self.log_path('master')} and {self.log_path('worker')}")

    def status(self) -> dict:
        """The master's JSON status page (workers, running and completed applications)."""
        url = f"http://127.0.0.1:{self.master_ui}/json"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def applications(self) -> list[ClusterApp]:
        """Every application the master has seen, running or completed, oldest first."""
        doc = self.status()
        apps = doc.get("activeapps", []) + doc.get("completedapps", [])
        return sorted((ClusterApp(a["id"], a["name"], a["state"]) for a in apps),
                      key=lambda a: a.app_id)

    def stop(self) -> None:
        """Stop the worker (its executors with it), then the master; kill what does not stop."""
        for role in ("worker", "master"):
            proc = self._procs.pop(role, None)
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
