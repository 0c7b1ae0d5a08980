"""Unexpected exceptions of a run (Spark's, Py4J's, the OS's) as one-line diffcdc errors.

Whatever diffcdc does not raise itself reaches the user through :func:`unexpected_error`: a
snapshot Spark cannot read names the part file and the root cause, a full disk says so, and
anything else keeps its first line (the trace stays chained for ``--debug``).
"""

from __future__ import annotations

import errno
import os
import re

from diffcdc.errors import DiffcdcError, InputRefused, StorageError
from diffcdc.sources.base import PendingSnapshot
from diffcdc.spark_compat import FAILED_READ_FILE, error_text

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
    occurred while calling o123.parquet"); a full disk says so.
    """
    text = str(exc).strip()
    cause = error_text(exc).strip()  # a failed job's root cause, on PySpark 3.5 too
    first = cause.splitlines()[0] if cause else type(exc).__name__
    if getattr(exc, "errno", None) == errno.ENOSPC or "No space left on device" in text:
        return StorageError(
            "no space left on the device" + (f" under {state_dir}" if state_dir else ""),
            snapshot=snapshot.snapshot_id if snapshot else None,
            hint="free space on the state and staging disk, then run again (nothing was "
            "published; the half-written version is removed)",
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
