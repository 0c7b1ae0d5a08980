"""Crash injection for tests: die like ``kill -9`` at a named point of a run.

Set ``DIFFCDC_CRASH_AT`` to a point name (see :data:`POINTS`); the process ends at once with
``os._exit(137)``: no cleanup, no ``finally`` blocks, no flushed buffers, exactly as if killed.
``DIFFCDC_CRASH_AT=publish:2`` dies after the second data file of a batch is published.
Unset (the normal case), every call is a no-op.
"""

from __future__ import annotations

import os

ENV = "DIFFCDC_CRASH_AT"

POINTS = (
    "after_read",  # snapshot opened and validated, nothing computed
    "after_state_staged",  # new state version written to its (uncommitted) folder
    "after_changes_staged",  # landing files staged, batch not yet committed
    "after_claim",  # commit record written, nothing published
    "publish",  # publish:N — after the N-th data file is in place
    "before_mark_published",  # every file in place, not yet marked published
    "after_published",  # batch marked published, run not finished
)


def crash_point(name: str, count: int | None = None) -> None:
    """Exit immediately when ``DIFFCDC_CRASH_AT`` names this point."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    label = name if count is None else f"{name}:{count}"
    if wanted == label:
        os._exit(137)
