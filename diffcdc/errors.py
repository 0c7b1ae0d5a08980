"""One root exception for everything diffcdc raises on purpose.

Every error carries what an operator needs at 2 a.m.: which table, which snapshot or file,
what went wrong and what to do about it. ``str(err)`` is a single line; the CLI prints it and
exits with ``err.exit_code``:

* 2 — usage or configuration error (fix the command line or the config file)
* 3 — input refused (bad snapshot, late snapshot, duplicate/NULL keys, schema change, gate)
* 1 — anything else (publish conflict, concurrent run, storage failure, corrupt state)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

#: Completes the commands a message suggests with the options of the command line that runs
#: (set by :mod:`diffcdc.cli.main`; None when diffcdc is called from Python): ``(text, table)``
#: → text.
hint_commands: Callable[[str, str | None], str] | None = None


@dataclass(frozen=True)
class ErrorContext:
    """What the engine is working on while it runs code below it: an error built meanwhile
    names this table and snapshot unless its raise site names its own (the byte store, a
    source's reader or the state's records need not know which table they serve)."""

    #: The table (its configured name) the engine works on.
    table: str | None = None
    #: The snapshot the engine processes (None: none, or the work is a sink's, not the
    #: snapshot's — see :func:`error_context`).
    snapshot: str | None = None


_CONTEXT: ContextVar[ErrorContext] = ContextVar("diffcdc_error_context", default=ErrorContext())
_KEEP = object()


def current_context() -> ErrorContext:
    """The engine's error context in this thread (or task)."""
    return _CONTEXT.get()


@contextlib.contextmanager
def error_context(*, table: object = _KEEP, snapshot: object = _KEEP) -> Iterator[ErrorContext]:
    """Within the block, errors built name ``table`` / ``snapshot`` unless they name their own
    (a field not given stays as it is; ``snapshot=None`` clears it). A thread the block starts
    sees it only when handed the context (``contextvars.copy_context().run``)."""
    now = _CONTEXT.get()
    fields = {name: value for name, value in (("table", table), ("snapshot", snapshot))
              if value is not _KEEP}
    token = _CONTEXT.set(replace(now, **fields))  # type: ignore[arg-type]
    try:
        yield _CONTEXT.get()
    finally:
        _CONTEXT.reset(token)


class DiffcdcError(Exception):
    """Root of all diffcdc errors. Nothing raised on purpose escapes this hierarchy."""

    exit_code = 1
    #: True when retrying the same command later may succeed (network, throttling, a lock).
    transient = False

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        snapshot: str | None = None,
        path: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        where = _CONTEXT.get()
        self.message = message
        self.table = table or where.table
        self.snapshot = snapshot or where.snapshot
        self.path = path
        self.hint = hint

    def __str__(self) -> str:
        where = []
        if self.table:
            where.append(f"table {self.table}")
        if self.snapshot:
            where.append(f"snapshot {self.snapshot}")
        if self.path:
            where.append(f"file {self.path}")
        text = (", ".join(where) + ": " if where else "") + (self._complete(self.message) or "")
        if self.hint:
            text += f" — {self._complete(self.hint)}"
        return " ".join(text.split())  # always one line

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly description (for ``--json`` output and run reports)."""
        return {
            "error": type(self).__name__,
            "exit_code": self.exit_code,
            "message": self._complete(self.message),
            "table": self.table,
            "snapshot": self.snapshot,
            "path": self.path,
            "hint": self._complete(self.hint),
        }

    def restated(self, message: str, **fields: str | None) -> DiffcdcError:
        """A NEW error of this class built from this complete one: ``message`` and the
        ``fields`` given (``snapshot``, ``hint`` ...) replace its own; everything else (its
        class, exit code, the gate's reports) is kept, and this one, untouched, is its cause.
        For errors that sum up others (a run's failed sinks), never to amend a raised one."""
        new = type(self).__new__(type(self))  # its __init__ may take other arguments
        Exception.__init__(new, message)
        new.__dict__.update(self.__dict__)
        new.message = message
        for name, value in fields.items():
            setattr(new, name, value)
        new.__cause__ = self
        return new

    def _complete(self, text: str | None) -> str | None:
        """``text``, the commands it suggests completed to run as printed (``hint_commands``)."""
        if not text or hint_commands is None:
            return text
        return hint_commands(text, self.table)


class UsageError(DiffcdcError):
    """The command line is wrong."""

    exit_code = 2


class ConfigError(DiffcdcError):
    """The configuration file or a table definition is invalid."""

    exit_code = 2


class StateOwnerError(ConfigError):
    """The table's state folder holds another table's state (two names map to one folder)."""


class InputRefused(DiffcdcError):
    """A snapshot cannot be accepted; nothing was published and state is unchanged."""

    exit_code = 3


class LateSnapshotError(InputRefused):
    """A snapshot sorts at or before the last committed one but was never processed."""


class KeyViolation(InputRefused):
    """Key columns missing, NULL or not unique in a snapshot."""


class SchemaChangeError(InputRefused):
    """A snapshot's columns or types are not compatible with the table's committed schema."""


class QualityGateFailed(InputRefused):
    """A blocking data-quality check failed."""

    def __init__(self, message: str, *, gate: list[dict[str, object]] | None = None,
                 **where: str | None) -> None:
        super().__init__(message, **where)
        #: The gate's reports of the refused snapshot (JSON-friendly; kept in the run's report).
        self.gate = list(gate or [])


class ConcurrentRunError(DiffcdcError):
    """Another run of the same table holds the lock or committed first."""

    transient = True


class PublishConflict(DiffcdcError):
    """A landing file already exists with different content: never overwritten."""


class TargetMismatch(DiffcdcError):
    """A sink's target does not match what the state says that sink published."""


class LandingZoneMismatch(TargetMismatch):
    """The landing folder does not match what the state says was published."""


class StateError(DiffcdcError):
    """The state store is unreadable or inconsistent."""


class SparkConnectLost(DiffcdcError):
    """The Spark Connect server a run works through stopped answering (killed, hung, its
    network gone) for longer than ``connect_timeout``; what the table holds is released."""

    transient = True


class StorageError(DiffcdcError):
    """A storage operation failed (local IO or remote service)."""


class TransientStorageError(StorageError):
    """A storage operation failed in a way that may succeed on retry."""

    transient = True


class SourceError(DiffcdcError):
    """A snapshot source (a database, a DataFrame) could not be read; nothing was published."""


class SourceUnavailable(SourceError):
    """The source could not be reached (connection refused or lost); retrying may succeed."""

    transient = True
