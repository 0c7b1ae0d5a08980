"""A sink whose target is a dict in this process, told to fail at a chosen step and version.

For engine tests: what a run commits, publishes, skips and retries per sink, without a file
format, a server or a second JVM. The target (:class:`MemoryTarget`) outlives the sink objects
a run builds, so several runs publish into the same one; it applies each published version's
changes to the rows it holds and refuses what a real target would show as a mistake (a gap or
a version published out of order, an insert of a key it holds, an update or delete of one it
lacks), and keeps every version it took, so a test can ask for "each version exactly once, in
order".

A fault (:meth:`MemoryTarget.fail_at`) makes the sink raise at one step of the
:class:`~diffcdc.sinks.base.Sink` protocol — ``prepare``, ``check`` (verifying the target
before a commit), ``accept``, ``stage``, ``publish`` or ``replay`` (``diffcdc verify``) — at one
version or any, a given number of times or until :meth:`MemoryTarget.heal`:

* ``transient``: :class:`~diffcdc.errors.TransientStorageError` (an outage; ``transient``);
* ``terminal``: :class:`~diffcdc.errors.TargetMismatch` (the target changed behind diffcdc's
  back), at ``accept`` :class:`~diffcdc.errors.InputRefused` (what ``accept`` raises);
* ``unexpected``: a ``RuntimeError``, not a diffcdc error (a bug in a sink);
* ``read_only``, ``full``: the ``OSError`` (EROFS, ENOSPC) of a disk the target lies on,
  naming a file ``/memory/<sink>/<step>.tmp`` (at ``stage``: one in the staging folder, on
  the state's disk).

``prepare`` and ``check`` are told no version: theirs is the one the run would commit next
(the table's head + 1).

How a run gets memory sinks: a table config from :meth:`MemorySinks.table` holds a
:class:`MemorySinkConfig` per memory sink (beside any real sink), and
:meth:`MemorySinks.registered` registers the ``memory`` sink type's plug-in
(:func:`diffcdc.sinks.registry.register_sink`) for the test, so a config names it by its type
(``{"type": "memory", "name": ...}``) and diffcdc builds a :class:`MemorySink` for it like any
sink.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict

from diffcdc.config import TableConfig
from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.compare import Replayed
from diffcdc.errors import InputRefused, TargetMismatch, TransientStorageError
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.plugin import SinkPlugin
from diffcdc.sinks.registry import registered_sink
from diffcdc.spark.compat import to_arrow
from diffcdc.state.store import TableState

Step = Literal["prepare", "check", "accept", "stage", "publish", "replay"]
STEPS: tuple[Step, ...] = ("prepare", "check", "accept", "stage", "publish", "replay")
Kind = Literal["transient", "terminal", "unexpected", "read_only", "full"]
CHANGES_FILE = "changes.parquet"


@dataclass
class Fault:
    """Fail at ``step`` (at ``version``, or any with None), ``times`` times (None: until
    healed), the way ``kind`` says."""

    step: Step
    version: int | None = None
    kind: Kind = "terminal"
    times: int | None = None

    def error(self, sink_id: str, version: int | None, where: str | None = None) -> Exception:
        what = f"injected {self.kind} failure of memory sink {sink_id} at {self.step}"
        what += f" of version {version}" if version is not None else ""
        if self.kind == "unexpected":
            return RuntimeError(what)
        if self.kind in ("read_only", "full"):  # the target's own disk, as the OS says it
            code = errno.EROFS if self.kind == "read_only" else errno.ENOSPC
            path = os.path.join(where, CHANGES_FILE) if where else f"/memory/{sink_id}/{self.step}.tmp"
            return OSError(code, os.strerror(code), path)
        if self.kind == "transient":
            return TransientStorageError(what, hint="the memory target is down; run again")
        if self.step == "accept":
            return InputRefused(what)
        return TargetMismatch(what, hint="heal the memory target")


@dataclass
class Published:
    """One version as the target took it."""

    version: int
    initial: bool
    changes: list[dict[str, Any]]  #: the change rows, each with ``OP``


@dataclass
class MemoryTarget:
    """What a memory sink publishes into: the rows it holds now and every version it took."""

    name: str
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    published: list[Published] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    #: Every call of the sink protocol: (step, version); the failed ones too.
    calls: list[tuple[str, int | None]] = field(default_factory=list)
    #: Mistakes of the engine the target saw (each also raised as TargetMismatch).
    violations: list[str] = field(default_factory=list)

    def fail_at(self, step: Step, version: int | None = None, kind: Kind = "terminal",
                times: int | None = None) -> Fault:
        """Make the sink fail at ``step`` (see :class:`Fault`)."""
        assert step in STEPS, step
        fault = Fault(step, version, kind, times)
        self.faults.append(fault)
        return fault

    def heal(self) -> None:
        """No more faults."""
        self.faults.clear()

    @property
    def versions(self) -> list[int]:
        """The versions published, in the order they were taken."""
        return [p.version for p in self.published]

    def image(self) -> list[dict[str, Any]]:
        """The rows the target holds, without the operation column."""
        return list(self.rows.values())

    def calls_at(self, step: str) -> list[int | None]:
        """The versions ``step`` was called with, in order (failed calls included)."""
        return [v for s, v in self.calls if s == step]

    def assert_once_in_order(self) -> None:
        """Every version taken once, oldest first, and no mistake seen."""
        assert self.violations == [], self.violations
        assert self.versions == sorted(set(self.versions)), self.versions

    def step(self, sink_id: str, step: Step, version: int | None, where: str | None = None
             ) -> None:
        """A call of the sink protocol: recorded, and failed when a fault says so (a disk's
        failure names a file in ``where``, the staging folder at ``stage``)."""
        self.calls.append((step, version))
        for fault in self.faults:
            if fault.step != step or (fault.version is not None and fault.version != version):
                continue
            if fault.times is not None:
                if fault.times <= 0:
                    continue
                fault.times -= 1
            raise fault.error(sink_id, version, where)

    def refuse(self, message: str) -> None:
        """Record a mistake of the engine and raise it as the target would."""
        self.violations.append(message)
        raise TargetMismatch(f"memory target {self.name}: {message}")

    def apply(self, version: int, initial: bool, keys: tuple[str, ...], columns: list[str],
               changes: list[dict[str, Any]], previous: int | None) -> None:
        """Take one published version: its change rows applied to the rows held (``initial``:
        from nothing), after the sink's ``previous`` version."""
        last = self.versions[-1] if self.published else None
        if not initial and last != previous:
            self.refuse(f"version {version} follows {previous}, the target is at {last}")
        if initial:
            self.rows = {}
        for change in changes:
            row = {c: v for c, v in change.items() if c != OP}
            key = tuple(row[k] for k in keys)
            op = change[OP]
            if op == OP_INSERT and key in self.rows:
                self.refuse(f"version {version} inserts {key}, which the target holds")
            if op in (OP_UPDATE, OP_DELETE) and key not in self.rows:
                self.refuse(f"version {version} changes {key}, which the target lacks")
            if op == OP_DELETE:
                del self.rows[key]
            else:
                self.rows[key] = row
        self.columns = list(columns)
        self.published.append(Published(version, initial, changes))


class MemorySinkConfig(BaseModel):
    """A memory sink in a table's config (see :meth:`MemorySinks.table`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: Literal["memory"] = "memory"
    name: str

    @property
    def sink_id(self) -> str:
        return self.name

    def targets(self, table: str, schema_name: str | None = None) -> list[Any]:
        return []  # a dict in this process: nothing another sink could share


class MemorySink(Sink):
    """The :class:`~diffcdc.sinks.base.Sink` over a :class:`MemoryTarget`.

    Staging writes the change set as one Parquet file into the sink's staging folder (so a
    version committed in one run is published from there in a later one, as with every
    sink); publishing applies it to the target, once."""

    type = "memory"

    def __init__(self, sink_id: str, table: SinkTable, target: MemoryTarget,
                 state: TableState) -> None:
        super().__init__(sink_id, table)
        self.target = target
        self.state = state

    def _next_version(self) -> int:
        head = self.state.head()
        return head.version + 1 if head is not None else 1

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "target": f"memory:{self.target.name}"}

    def prepare(self, scratch_dir: str) -> None:
        self.target.step(self.id, "prepare", self._next_version())

    def check(self, history: SinkHistory) -> None:
        self.target.step(self.id, "check", self._next_version())
        last = history.last[0] if history.last is not None else None
        held = self.target.versions[-1] if self.target.published else None
        if last is not None and held != last:
            raise TargetMismatch(
                f"memory target {self.target.name} is at version {held}, the state says {last}"
            )

    def accept(self, changes: ChangeSet) -> None:
        self.target.step(self.id, "accept", changes.version)

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        self.target.step(self.id, "stage", changes.version, staging_dir)
        os.makedirs(staging_dir, exist_ok=True)
        path = os.path.join(staging_dir, CHANGES_FILE)
        pq.write_table(to_arrow(changes.frame), path)
        with open(path, "rb") as handle:
            sha = hashlib.sha256(handle.read()).hexdigest()
        return {"file": CHANGES_FILE, "sha256": sha, "columns": changes.columns}

    def publish(self, version: int, manifest: dict[str, Any], staging_dir: str,
                history: SinkHistory, *, checked: bool = False) -> None:
        self.target.step(self.id, "publish", version)
        if version in self.target.versions:
            return  # published before (a run that died before marking it)
        path = os.path.join(staging_dir, manifest["file"])
        with open(path, "rb") as handle:
            if hashlib.sha256(handle.read()).hexdigest() != manifest["sha256"]:
                self.target.refuse(f"the staged changes of version {version} differ")
        manifests = [v for v, _ in history.manifests]
        if manifests[-1:] != [version]:
            self.target.refuse(f"history of version {version} ends at {manifests[-1:]}")
        previous = manifests[-2] if len(manifests) > 1 else None
        changes = pq.read_table(path).to_pylist()
        self.target.apply(version, bool(manifest.get("initial")), self.table.keys,
                           manifest["columns"], changes, previous)

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        return version in self.target.versions

    def replay(self, spark: Any) -> Replayed:
        self.target.step(self.id, "replay", None)
        return Replayed(list(self.table.keys), list(self.target.columns), self.target.image(),
                        units=len(self.target.published))


class MemoryPlugin(SinkPlugin):
    """The ``memory`` sink type; a subclass per :class:`MemorySinks` holds its targets."""

    type = "memory"
    config = MemorySinkConfig
    targets: ClassVar[dict[str, MemoryTarget]] = {}

    @classmethod
    def build(cls, config: MemorySinkConfig, table: SinkTable, state: TableState) -> Sink:
        return MemorySink(config.sink_id, table, cls.targets[config.name], state)


class MemorySinks:
    """The memory targets of one test, and table configs that use them; :meth:`registered`
    registers the ``memory`` sink type building sinks over them for a block."""

    def __init__(self) -> None:
        self.targets: dict[str, MemoryTarget] = {}
        self.plugin = type("TestMemoryPlugin", (MemoryPlugin,), {"targets": self.targets})

    @classmethod
    @contextmanager
    def registered(cls) -> Iterator[MemorySinks]:
        """A new set of memory targets, its sink type registered for the block."""
        sinks = cls()
        with registered_sink(sinks.plugin):
            yield sinks

    def add(self, name: str) -> MemoryTarget:
        """A new memory target; a table's sink of that name publishes into it."""
        assert name not in self.targets, name
        self.targets[name] = MemoryTarget(name)
        return self.targets[name]

    def table(self, name: str, source: str, keys: list[str], sinks: list[MemoryTarget | dict],
              **fields: Any) -> TableConfig:
        """A table config whose sinks are ``sinks`` in order: a memory target's sink
        (``{"type": "memory", "name": ...}``, the type registered by :meth:`registered`), or a
        real sink's entry (``{"type": "open_mirroring", ...}``), validated as the config file
        would."""
        entries = [{"type": self.plugin.type, "name": s.name} if isinstance(s, MemoryTarget) else s
                   for s in sinks]
        return TableConfig.model_validate(
            {"name": name, "source": source, "keys": keys, "sinks": entries, **fields})

