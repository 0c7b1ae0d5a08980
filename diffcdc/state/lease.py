"""The run lease: one run works on a table at a time, on any store a state root can be on.

The lease is the document ``lease.json`` in the table's state folder: who holds it (host,
process, run id), when it was acquired, its last heartbeat and when it expires. A run creates
it with ``put_if_absent``, a heartbeat thread renews it every quarter of the lease time with
``replace_if`` (conditional on the version it wrote last), and the run deletes it at the end.

* A second run while the holder is alive is refused at once, naming the holder.
* A holder killed with ``kill -9`` leaves its lease behind. On the same machine (same host
  name, boot and process namespace) a dead process is seen at once (its pid is gone or is
  another process now); elsewhere the lease is taken over once it has expired. Either way the
  takeover is a ``replace_if`` of the version that was read, so of two runs taking over, one
  wins; the takeover is logged as a warning naming the old holder.
* A holder whose heartbeat could not renew the lease before it expired has lost it: its
  commit is refused (:meth:`Lease.check`). Commits stay compare-and-swap regardless; the lease
  turns a guaranteed later failure into an immediate, clear one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from diffcdc.errors import ConcurrentRunError, DiffcdcError
from diffcdc.storage.base import ByteStore, Tagged

log = logging.getLogger(__name__)

LEASE_PATH = "lease.json"
#: Lease time when the config does not say (``[diffcdc] lease_seconds``).
DEFAULT_LEASE_SECONDS = 120.0


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).isoformat(timespec="seconds")


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' when unknown): pids are reused."""
    stat = _read_text(f"/proc/{pid}/stat")
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def _machine() -> str:
    """This machine and process namespace: where a pid means the same process ('' unknown)."""
    boot = _read_text("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{boot}/{namespace}" if boot and namespace else ""


@dataclass(frozen=True)
class LeaseHolder:
    """What ``lease.json`` says: who holds the table and until when."""

    run_id: str
    host: str
    pid: int
    machine: str  #: host, boot id and pid namespace ('' where unknown)
    process_start: str
    acquired: float  #: seconds since the epoch
    heartbeat: float
    expires: float

    def describe(self) -> str:
        return (
            f"run {self.run_id} (pid {self.pid} on {self.host}, acquired {_iso(self.acquired)}, "
            f"last heartbeat {_iso(self.heartbeat)})"
        )

    def to_bytes(self) -> bytes:
        document = {**asdict(self), "expires_at": _iso(self.expires)}
        return json.dumps(document, indent=1, sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> LeaseHolder | None:
        """The holder, or None for an empty or unreadable lease (a writer died creating it)."""
        try:
            raw = json.loads(data)
            return cls(
                run_id=str(raw["run_id"]), host=str(raw["host"]), pid=int(raw["pid"]),
                machine=str(raw.get("machine", "")), process_start=str(raw.get("process_start", "")),
                acquired=float(raw["acquired"]), heartbeat=float(raw["heartbeat"]),
                expires=float(raw["expires"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def died_here(self) -> bool:
        """Whether the holder ran on this machine and its process is gone."""
        if not self.machine or self.machine != _machine():
            return False
        start = _process_start(self.pid)
        return not start or (bool(self.process_start) and start != self.process_start)


class Lease:
    """The lease of one table, held by one run (see the module docstring)."""

    def __init__(
        self,
        storage: ByteStore,
        table: str,
        run_id: str,
        seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {seconds}")
        self.storage = storage
        self.table = table
        self.run_id = run_id
        self.seconds = float(seconds)
        self.clock = clock
        self.taken_from: LeaseHolder | None = None
        self._mine: LeaseHolder | None = None
        self._tag: str | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acquiring and releasing -----------------------------------------------------------

    def _record(self, acquired: float | None = None) -> LeaseHolder:
        now = self.clock()
        return LeaseHolder(
            run_id=self.run_id, host=socket.gethostname(), pid=os.getpid(), machine=_machine(),
            process_start=_process_start(os.getpid()), acquired=now if acquired is None else acquired,
            heartbeat=now, expires=now + self.seconds,
        )

    def acquire(self) -> None:
        """Take the lease, or raise :class:`ConcurrentRunError` naming its live holder."""
        for _ in range(5):
            mine = self._record()
            try:
                self.storage.put_if_absent(LEASE_PATH, mine.to_bytes())
            except FileExistsError:
                pass
            else:
                self._hold(mine)
                return
            current = self.storage.read(LEASE_PATH)
            if current is None:
                continue  # released in between: try to create it again
            holder = LeaseHolder.parse(current.data)
            self._refuse_if_alive(holder, current)
            if self.storage.replace_if(LEASE_PATH, mine.to_bytes(), current.tag, stale_after=self.seconds):
                self.taken_from = holder
                log.warning(
                    "table %s: took over the run lease of %s, which %s",
                    self.table,
                    holder.describe() if holder else "a run that died while creating it",
                    "is no longer running" if holder and holder.died_here()
                    else f"expired at {_iso(holder.expires if holder else current.mtime + self.seconds)}",
                )
                self._hold(mine)
                return
        raise ConcurrentRunError(
            "another diffcdc run is taking the table's lease at the same moment",
            table=self.table, path=self.storage.describe(LEASE_PATH),
            hint="run again; only one run of a table can work at a time",
        )

    def _refuse_if_alive(self, holder: LeaseHolder | None, current: Tagged) -> None:
        now = self.clock()
        if holder is None:
            if now < current.mtime + self.seconds:
                raise ConcurrentRunError(
                    "another diffcdc run is taking the table's lease right now",
                    table=self.table, path=self.storage.describe(LEASE_PATH),
                    hint="wait for it to finish (the scheduler may have started two runs)",
                )
            return
        if holder.died_here() or now >= holder.expires:
            return
        raise ConcurrentRunError(
            f"another diffcdc run is working on this table: {holder.describe()}; its lease "
            f"expires at {_iso(holder.expires)} unless renewed",
            table=self.table, path=self.storage.describe(LEASE_PATH),
            hint="wait for it to finish (the scheduler may have started two runs); a run that "
            "was killed is taken over once its lease has expired",
        )

    def _hold(self, mine: LeaseHolder) -> None:
        found = self.storage.read(LEASE_PATH)
        if found is None or LeaseHolder.parse(found.data) != mine:
            raise ConcurrentRunError(
                "another diffcdc run took the table's lease at the same moment",
                table=self.table, path=self.storage.describe(LEASE_PATH),
                hint="run again; only one run of a table can work at a time",
            )
        self._mine, self._tag = mine, found.tag

    def start_heartbeat(self) -> None:
        """Renew the lease every quarter of its time in a daemon thread until released."""
        self._thread = threading.Thread(
            target=self._beat, name=f"diffcdc-lease-{self.table}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds / 4):
            try:
                if not self.renew():
                    return
            except (OSError, DiffcdcError) as exc:  # a storage hiccup: try again next beat
                log.warning("table %s: the run lease could not be renewed (%s)", self.table, exc)

    def renew(self) -> bool:
        """Push the expiry forward; False (and the lease counts as lost) when it is not ours."""
        if self._mine is None or self._lost:
            return False
        current = self.storage.read(LEASE_PATH)
        if current is None or current.tag != self._tag:
            self._lose("another run took it over")
            return False
        if self.clock() >= self._mine.expires:
            self._lose("it expired before the heartbeat could renew it")
            return False
        mine = self._record(acquired=self._mine.acquired)
        if not self.storage.replace_if(LEASE_PATH, mine.to_bytes(), current.tag, stale_after=self.seconds):
            self._lose("another run took it over")
            return False
        found = self.storage.read(LEASE_PATH)
        if found is None or LeaseHolder.parse(found.data) != mine:
            self._lose("another run took it over")
            return False
        self._mine, self._tag = mine, found.tag
        return True

    def _lose(self, why: str) -> None:
        self._lost = why
        log.warning("table %s: this run lost its lease: %s", self.table, why)

    def check(self) -> None:
        """Refuse to commit once the lease is lost (or expired unrenewed)."""
        if self._mine is not None and not self._lost and self.clock() >= self._mine.expires:
            self._lose("it expired before the heartbeat could renew it")
        if self._lost:
            raise ConcurrentRunError(
                f"this run lost the table's lease ({self._lost}); it commits and publishes "
                "nothing more (another run may be working on the table)",
                table=self.table, path=self.storage.describe(LEASE_PATH),
                hint="run again; if heartbeats are late (a busy machine, a slow store), "
                "raise lease_seconds in [diffcdc]",
            )

    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still this run's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.seconds)
        if self._mine is None:
            return
        current = self.storage.read(LEASE_PATH)
        if current is not None and current.tag == self._tag:
            with contextlib.suppress(OSError):
                self.storage.delete(LEASE_PATH)
        self._mine = None
