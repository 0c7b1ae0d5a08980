"""Unexpected exceptions of a run (Spark's, Py4J's, the OS's) as one-line diffcdc errors.

Whatever diffcdc does not raise itself reaches the user through :func:`unexpected_error`: a
snapshot Spark cannot read names the part file and the root cause, a full or read-only
disk of the state says so (a sink's disk is that sink's error: :mod:`diffcdc.engine.sink_errors`), and
anything else keeps its first line (the trace stays chained for ``--debug``).
"""

from __future__ import annotations

import errno
import os
import re

from diffcdc.engine.sink_errors import DISK_PROBLEMS, disk_problem, under
from diffcdc.errors import DiffcdcError, InputRefused, StorageError
from diffcdc.sources.base import PendingSnapshot
from diffcdc.spark.compat import FAILED_READ_FILE, error_text

_UNREADABLE = (
    *FAILED_READ_FILE,
    "CANNOT_READ_FILE_FOOTER",
    "MALFORMED",
    "is not a Parquet file",
    "PARQUET_COLUMN_DATA_TYPE_MISMATCH",
)


_FILE_URI = re.compile(r"file:(?://)?(/[^\s'\"\],;]+)")
_ROOT_CAUSE = re.compile(r"^(?:Caused by: )?(?:\S+(?:Exception|Error)): (.+)$", re.M)


def unexpected_error(
    exc: BaseException, snapshot: PendingSnapshot | None = None, state_dir: str | None = None
) -> DiffcdcError:
    """Turn a Spark/OS exception into a one-line DiffcdcError (the trace stays chained).

    A snapshot Spark cannot read names the part file and the root cause (not "An error
    occurred while calling o123.parquet"); a full (or read-only) disk of the state says so.
    """
    text = str(exc).strip()
    cause = error_text(exc).strip()  # a failed job's root cause, on PySpark 3.5 too
    first = cause.splitlines()[0] if cause else type(exc).__name__
    disk = disk_problem(exc)
    # A full disk without a file named is the state's (Spark writes only there); any other
    # disk failure is said to be the state's only when it names a file of it.
    state_disk = disk is not None and (
        disk[0] == errno.ENOSPC if disk[1] is None
        else state_dir is not None and under(exc, state_dir))
    if disk is not None and state_disk:  # a sink's disk is that sink's error
        code, name = disk
        where = name or state_dir
        return StorageError(
            DISK_PROBLEMS[code] + (f" under {where}" if where else ""),
            snapshot=snapshot.snapshot_id if snapshot else None,
            hint=("free space on the state's disk" if code in (errno.ENOSPC, errno.EDQUOT)
                  else "make the state's folder writable" if code in (
                      errno.EROFS, errno.EACCES, errno.EPERM)
                  else "check the state's disk") + ", then run again (a version not yet "
            "committed is removed and made again; a committed one is published where it is "
            "missing)",
        )
    if snapshot is not None and any(marker in text for marker in _UNREADABLE):
        inside = os.path.abspath(snapshot.path)
        files = [p.rstrip(".") for p in _FILE_URI.findall(text) if p.startswith(inside)]
        causes = [c.strip() for c in _ROOT_CAUSE.findall(text) if "calling o" not in c]
        reason = causes[-1] if causes else first
        return InputRefused(
            f"cannot read snapshot: {reason[:300]}",
            snapshot=snapshot.snapshot_id,
            path=next((p for p in files if p != inside), snapshot.path),
            hint="the file is corrupt, truncated or ragged; replace it and run again",
        )
    return DiffcdcError(
        f"{type(exc).__name__}: {first[:300]}",
        snapshot=snapshot.snapshot_id if snapshot else None,
        hint="run again with --debug for the full trace",
    )
