"""A real MariaDB server for the tests: its own data dir in a temp dir, on a loopback port.

``MariaDbServer`` runs ``mariadb-install-db`` in a fresh temp dir, starts ``mariadbd`` on a free
127.0.0.1 port (as the ``mysql`` user when run as root: mariadbd refuses root), creates a
password-protected user and a database, and stops it. ``sql`` runs statements through the
``mariadb`` client. Needs Debian's ``mariadb-server`` and ``libmariadb-java`` (``bash
.ci/install test``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from tests.support.kafka_broker import free_port

JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"


def mariadb_missing() -> str | None:
    """Why the MariaDB tests cannot run here (None: they can)."""
    if not shutil.which("mariadbd") and not os.path.exists("/usr/sbin/mariadbd"):
        return "needs Debian's mariadb-server (bash .ci/install test)"
    if not os.path.exists(JDBC_JAR):
        return "needs Debian's libmariadb-java (bash .ci/install test)"
    return None


class MariaDbServer:
    """One MariaDB server on ``127.0.0.1:port`` with a password-protected user."""

    user = "diffcdc_reader"
    password = "s3cret-Mar1a"
    database = "erp"

    def __init__(self) -> None:
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="diffcdc-mariadb-")
        os.chmod(self.root, 0o755)
        self.data = os.path.join(self.root, "data")
        self.socket = os.path.join(self.root, "mysqld.sock")
        self.log = os.path.join(self.root, "server.log")
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, "mysql", "mysql")
        self.proc: subprocess.Popen[bytes] | None = None
        command = ["mariadb-install-db", "--no-defaults", f"--datadir={self.data}",
                   "--auth-root-authentication-method=socket", "--skip-test-db"]
        if self._as_root:
            command.append("--user=mysql")
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {done.stderr.strip() or done.stdout.strip()}")

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:mariadb://127.0.0.1:{self.port}/{self.database}"

    def start(self) -> None:
        command = [
            "/usr/sbin/mariadbd", "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--socket={self.socket}", f"--log-error={self.log}",
            f"--pid-file={os.path.join(self.root, 'mariadbd.pid')}", "--skip-log-bin",
            "--innodb-buffer-pool-size=32M", "--character-set-server=utf8mb4",
        ]
        if self._as_root:
            command.append("--user=mysql")
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            ping = subprocess.run(["mariadb", "--no-defaults", "-S", self.socket, "-u", "root",
                                   "-e", "SELECT 1"], capture_output=True, text=True)
            if ping.returncode == 0:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mariadbd did not start: {self._log_tail()}")
            time.sleep(0.2)
        self.sql(
            f"CREATE DATABASE IF NOT EXISTS {self.database};"
            f"CREATE USER IF NOT EXISTS '{self.user}'@'%' IDENTIFIED BY '{self.password}';"
            f"GRANT ALL ON {self.database}.* TO '{self.user}'@'%';",
            database="mysql",
        )

    def _log_tail(self) -> str:
        try:
            with open(self.log) as handle:
                return " | ".join(handle.read().strip().splitlines()[-5:])
        except OSError:
            return "no log"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def sql(self, text: str, database: str | None = None) -> str:
        """Run SQL through the client as root over the socket; the output, tab-separated."""
        done = subprocess.run(
            ["mariadb", "--no-defaults", "-S", self.socket, "-u", "root", "-N", "-B",
             "--default-character-set=utf8mb4", "-D", database or self.database, "-e", text],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"mariadb failed: {done.stderr.strip()}")
        return done.stdout.strip()
