"""Publishing a committed version to every sink of the table, each exactly once.

Each sink publishes on its own and is marked published in state on its own: one sink that
fails (an outage, a conflict) neither blocks nor repeats another. Publishing is idempotent in
every sink, so a version is simply published again after a crash; only what is missing lands.
"""

from __future__ import annotations

from typing import Any

from diffcdc.engine.context import RunContext, sink_history, staging_dir
from diffcdc.errors import DiffcdcError
from diffcdc.faults import crash_point
from diffcdc.state.store import Commit


def publish_version(ctx: RunContext, commit: Commit) -> dict[str, dict[str, Any]]:
    """Publish ``commit`` to each configured sink that has not published it yet.

    Returns what each sink published (from its manifest). Raises the first sink's error after
    every other sink had its turn; the failed sinks stay unpublished for the next run.
    """
    record = commit.record
    commits = ctx.state.commits()
    failures: list[DiffcdcError] = []
    done: dict[str, dict[str, Any]] = {}
    for sink_id in commit.unpublished:
        sink = ctx.sinks.get(sink_id)
        if sink is None:
            ctx.say(f"version {commit.version}: sink {sink_id} is no longer configured; skipped")
            continue
        manifest = record.sinks[sink_id].manifest
        try:
            sink.publish(
                commit.version,
                manifest,
                staging_dir(ctx.state, record, sink_id),
                sink_history(commits, sink_id, upto=commit.version),
            )
            crash_point("before_mark_published", scope=sink_id)
            ctx.state.mark_published(commit.version, sink_id, {})
        except DiffcdcError as exc:
            exc.table = exc.table or ctx.table.name
            exc.message = f"sink {sink_id}: {exc.message}"
            failures.append(exc)
            ctx.say(f"version {commit.version}: sink {sink_id} failed: {exc.message}")
            continue
        done[sink_id] = manifest
    if failures:
        raise failures[0]
    return done


def configured_unpublished(ctx: RunContext, commit: Commit) -> list[str]:
    """The sinks of the run's config that have not published ``commit`` yet."""
    return [s for s in commit.unpublished if s in ctx.sinks]
