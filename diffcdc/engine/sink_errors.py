"""A sink's own failures as that sink's one-line error, naming the place it writes.

Whatever a sink raises while it is prepared, checked or published — an ``OSError`` of its
disk (read-only, full, no permission, an I/O error), a library's or Spark's exception, a
:class:`~diffcdc.errors.DiffcdcError` of its own — fails that sink alone (see
:mod:`diffcdc.engine.publish`): :func:`sink_error` words it, with the sink's target and, for a
disk, what is wrong with it and the way out, as a :class:`SinkFailure` the run's error is built
from (the sink's own error is never amended). A sink's staged output lives in the state's
version folder, on the state's disk: :func:`staging_error` says so, and the version is not
committed (the table's state stays as it was).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any

from diffcdc.errors import ConfigError, DiffcdcError, InputRefused, StorageError, error_context
from diffcdc.sinks.base import Sink
from diffcdc.spark.compat import error_text

#: What an OSError's errno says about the disk it came from.
DISK_PROBLEMS = {
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "an input/output error",
}
#: The same problems as the JVM (Spark) or Rust (delta-rs) word them inside an error's text.
_DISK_TEXTS = {
    "Read-only file system": errno.EROFS,
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Permission denied": errno.EACCES,
    "Operation not permitted": errno.EPERM,
    "Input/output error": errno.EIO,
}


@dataclass(frozen=True)
class SinkFailure:
    """A sink that failed in a run: its error as raised (the sink's own, or the one-line
    error :func:`sink_error` built for a foreign exception) and, for a sink's own error whose
    text shows a disk failure, the engine's way out for that disk (the run's error says it
    instead of the sink's hint)."""

    sink_id: str
    error: DiffcdcError
    disk_hint: str | None = None

    @property
    def message(self) -> str:
        """What the run's error says of this sink: its error's message, naming the sink."""
        text = self.error.message
        return text if text.startswith(f"sink {self.sink_id}: ") else f"sink {self.sink_id}: {text}"


def disk_problem(exc: BaseException) -> tuple[int, str | None] | None:
    """``(errno, file)`` when ``exc`` (or an exception it was raised from) is a disk's
    failure: read-only, full, no permission, I/O error (``file``: the one named, if any)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno in DISK_PROBLEMS:
            name = seen.filename if isinstance(seen.filename, str) else None
            return seen.errno, name
        seen = seen.__cause__ or seen.__context__
    text = f"{exc} {error_text(exc)}"
    for marker, code in _DISK_TEXTS.items():
        if marker in text:
            return code, None
    return None


def under(exc: BaseException, folder: str) -> bool:
    """Whether ``exc`` is a disk failure of a file in ``folder`` (e.g. the state's, while a
    sink reads its staged output or records a mark there)."""
    found = disk_problem(exc)
    if found is None or found[1] is None:
        return False
    name, root = os.path.abspath(found[1]), os.path.abspath(folder)
    return name == root or name.startswith(root.rstrip(os.sep) + os.sep)


def target_of(sink: Sink) -> str:
    """Where the sink writes, as ``status`` shows it (its id when that cannot be said)."""
    try:
        described: dict[str, Any] = sink.describe()
    except Exception:  # noqa: BLE001 - only for a message: the sink's id then
        return f"the target of sink {sink.id}"
    return str(described.get("target") or f"the target of sink {sink.id}")


def _first_line(exc: BaseException) -> str:
    text = error_text(exc).strip() or str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def _disk_hint(sink: Sink, code: int, after: str) -> str:
    fix = ("free space on its disk" if code in (errno.ENOSPC, errno.EDQUOT)
           else "make it writable again" if code in (errno.EROFS, errno.EACCES, errno.EPERM)
           else "check its disk")
    return f"{fix}, then run again: {after}; or start it afresh with '{sink.reload_command()}'"


def sink_error(sink: Sink, exc: BaseException, doing: str, version: int | None = None
               ) -> SinkFailure:
    """``exc``, raised while the sink was ``doing`` something (``"publishing version 3"``),
    as the sink's failure naming its target. A :class:`DiffcdcError` of the sink's is kept as
    it is, but one whose text shows a disk failure (delta-rs' ``Read-only file system (os
    error 30)``) comes with the disk's way out (:attr:`SinkFailure.disk_hint`). A foreign
    exception (the sink's disk, server or library) becomes our one-line error here, at the
    boundary: the error built where it is raised. A sink's failure is about its target, not
    the snapshot at hand: it never names one the sink did not name."""
    found = disk_problem(exc)
    if isinstance(exc, DiffcdcError) and (
            found is None or isinstance(exc, (InputRefused, ConfigError))):
        return SinkFailure(sink.id, exc)
    target = target_of(sink)
    after = (f"version {version} is committed and waits for this sink; once it works it "
             "publishes its unpublished versions in order (the table's other sinks go on)"
             if version is not None else
             "a version another sink of the table takes is committed and staged for it all "
             "the same; once it works it publishes them in order")
    if isinstance(exc, DiffcdcError):
        assert found is not None
        return SinkFailure(sink.id, exc, f"{DISK_PROBLEMS[found[0]]} at {target}: "
                                         f"{_disk_hint(sink, found[0], after)}")
    with error_context(snapshot=None):
        if found is not None:
            code, name = found
            where = f" ({name})" if name and name != target else ""
            error = StorageError(f"{doing} failed: {DISK_PROBLEMS[code]}{where}",
                                 table=sink.table.name, path=target,
                                 hint=_disk_hint(sink, code, after))
        else:
            error = StorageError(f"{doing} failed: {_first_line(exc)}",
                                 table=sink.table.name, path=target,
                                 hint=f"run again with --debug for the full trace; {after}")
    error.__cause__ = exc
    return SinkFailure(sink.id, error)


def staging_error(sink: Sink, exc: BaseException, version: int, staging_dir: str,
                  state_dir: str) -> DiffcdcError | None:
    """A sink's staging of ``version`` failed on the state's disk (``state_dir``): its output
    goes under ``staging_dir`` in the state's version folder. The version is not committed: a
    version a sink could not stage would leave that sink without its changes (it could only
    start afresh), so the whole version waits, as when a sink refuses a change set. None for
    any other failure: staging also reads the snapshot again (a file that turned unreadable is
    the snapshot's, see :mod:`diffcdc.engine.unexpected`), and a DiffcdcError is kept."""
    if isinstance(exc, DiffcdcError):
        return None
    found = disk_problem(exc)
    if found is None:
        return None
    code, name = found
    if not (under(exc, state_dir) or (name is None and code == errno.ENOSPC)):
        return None
    fix = ("free space on it" if code in (errno.ENOSPC, errno.EDQUOT)
           else "make it writable" if code in (errno.EROFS, errno.EACCES, errno.EPERM)
           else "check that disk")
    error = StorageError(
        f"sink {sink.id}: staging version {version} under {staging_dir} failed: "
        f"{DISK_PROBLEMS[code]}{f' ({name})' if name else ''} on the state's disk "
        f"({state_dir})",
        table=sink.table.name,
        hint=f"{fix}, then run again (nothing was committed; the half-written version is "
             "removed)",
    )
    error.__cause__ = exc
    return error
