"""Crash injection for tests: die like ``kill -9`` at a named point of a run.

Set ``DIFFCDC_CRASH_AT`` to a point name (see :data:`POINTS`); the process ends at once with
``os._exit(137)``: no cleanup, no ``finally`` blocks, no flushed buffers, exactly as if killed.
``DIFFCDC_CRASH_AT=publish:2`` dies after the second data file of a batch is published.
Unset (the normal case), every call is a no-op.

``DIFFCDC_PAUSE_AT`` (same point names) with ``DIFFCDC_PAUSE_FILE`` pauses there instead: the
process creates that file and waits until the test removes it (at most ten minutes), so a test
can do something to the world (stop a server) at a known moment of the run.
"""

from __future__ import annotations

import os

ENV = "DIFFCDC_CRASH_AT"
PAUSE_ENV = "DIFFCDC_PAUSE_AT"
PAUSE_FILE_ENV = "DIFFCDC_PAUSE_FILE"

POINTS = (
    "after_read",  # snapshot opened and validated, nothing computed
    "after_state_staged",  # new state version written to its (uncommitted) folder
    "after_changes_staged",  # landing files staged, batch not yet committed
    "after_claim",  # commit record written, nothing published
    "publish",  # publish:N — after the N-th data file is in place (publish@<sink>:N)
    "before_mark_published",  # a sink published, not yet marked (before_mark_published@<sink>)
    "after_published",  # batch marked published, run not finished
)


def crash_point(name: str, count: int | None = None, scope: str | None = None) -> None:
    """Exit immediately when ``DIFFCDC_CRASH_AT`` names this point.

    ``scope`` (a sink id) also makes the point reachable as ``name@scope`` (``publish@fabric:2``),
    so a test can die inside one particular sink's publishing.
    """
    wanted = os.environ.get(ENV)
    paused = os.environ.get(PAUSE_ENV)
    if not wanted and not paused:
        return
    suffix = "" if count is None else f":{count}"
    labels = {f"{name}{suffix}"} | ({f"{name}@{scope}{suffix}"} if scope else set())
    if wanted in labels:
        os._exit(137)
    if paused in labels:
        _pause(os.environ[PAUSE_FILE_ENV])


def _pause(path: str) -> None:
    """Create ``path`` and wait until it is gone (at most ten minutes)."""
    import time

    with open(path, "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 600
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
