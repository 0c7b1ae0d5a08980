"""A real PostgreSQL server for the tests: its own cluster in a temp dir, on a loopback port.

``PostgresServer`` runs ``initdb`` (password authentication, scram-sha-256) in a fresh temp
dir, starts ``postgres`` on a free 127.0.0.1 port and stops it. ``initdb`` and ``pg_ctl``
refuse to run as root, so as root they run as the ``postgres`` user (``runuser``) in a dir it
owns. ``sql`` runs statements through ``psql``; ``stop``/``start`` again on the same port
simulate an outage. Needs Debian's ``postgresql`` package (``bash .ci/install test``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.kafka_broker import free_port

JDBC_JAR = "/usr/share/java/postgresql.jar"


def postgres_bin() -> str:
    """The newest installed PostgreSQL's bin folder; fails with what to install."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("the JDBC tests need PostgreSQL: run `bash .ci/install test`")
    return os.path.dirname(found[-1])


class PostgresServer:
    """One PostgreSQL cluster on ``127.0.0.1:port`` with a password-protected superuser."""

    user = "diffcdc_admin"
    password = "s3cret-Adm1n"
    database = "postgres"

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="diffcdc-pg-")
        os.chmod(self.root, 0o755)
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        self._as_root = os.geteuid() == 0
        pwfile = os.path.join(self.root, "pw")
        with open(pwfile, "w") as handle:
            handle.write(self.password + "\n")
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        self._run(
            "initdb", "-D", self.data, "-U", self.user, "--pwfile", pwfile,
            "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C.UTF-8", "--no-sync",
        )
        os.unlink(pwfile)

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{self.database}"

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [os.path.join(self.bin, tool), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr.strip() or done.stdout.strip()}")
        return done

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def sql(self, text: str, database: str | None = None) -> str:
        """Run SQL through psql (stops at the first error); the output, unaligned."""
        env = {**os.environ, "PGPASSWORD": self.password}
        done = subprocess.run(
            [os.path.join(self.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
             "-d", database or self.database, "-c", text],
            capture_output=True, text=True, env=env,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return done.stdout.strip()

    @contextmanager
    def locked(self, schema: str, table: str) -> Iterator[None]:
        """``schema.table`` held in SHARE mode by another session while the block runs:
        readers go on, a writer waits for its lock (a sink's publish then ends at its
        ``lock_timeout``)."""
        import psycopg
        from psycopg import sql

        holder = psycopg.connect(host="127.0.0.1", port=self.port, dbname=self.database,
                                 user=self.user, password=self.password)
        try:
            holder.execute(sql.SQL("LOCK TABLE {}.{} IN SHARE MODE").format(
                sql.Identifier(schema), sql.Identifier(table)))
            yield
        finally:
            holder.rollback()
            holder.close()

    def popen_sql(self, script: str) -> subprocess.Popen[str]:
        """A psql process running ``script`` from stdin, in the background (a concurrent writer).

        Wait for it with :meth:`finish`."""
        env = {**os.environ, "PGPASSWORD": self.password}
        proc = subprocess.Popen(
            [os.path.join(self.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", self.database],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=env,
        )
        assert proc.stdin is not None
        proc.stdin.write(script)
        proc.stdin.close()
        return proc


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """Wait for a :meth:`PostgresServer.popen_sql` process; its stderr (raises if it failed)."""
    assert proc.stderr is not None
    try:
        proc.wait(timeout=timeout)
        errors = proc.stderr.read()
    finally:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"psql writer failed: {errors.strip()}")
    return errors
