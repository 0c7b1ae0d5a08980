"""Publishing committed versions to every sink of the table, each sink on its own.

Each sink publishes its committed versions in order, oldest first, and is marked published in
state per version. A sink that fails (an outage, a target changed behind its back) stops at
that version for this run and is named in the run's error; every other sink goes on
publishing, and later snapshots are still committed for all sinks, so the failed sink catches
up in order once it works again (or starts afresh with ``diffcdc reload --sink``). Whatever a sink
raises while it publishes (its disk read-only or full, its server, its library) is that sink's
failure, named with its target (:mod:`diffcdc.engine.sink_errors`); a failure to record the
mark is the state's and stops the run. Publishing
is idempotent in every sink, so a version is simply published again after a crash; only what
is missing lands.
"""

from __future__ import annotations

from collections.abc import Mapping

from diffcdc.engine.context import RunContext, sink_history, staging_dir
from diffcdc.engine.sink_errors import sink_error, under
from diffcdc.errors import DiffcdcError, current_context, error_context
from diffcdc.faults import crash_point
from diffcdc.state.records import sink_backlog
from diffcdc.state.store import Commit


def publish_backlog(
    ctx: RunContext,
    skip: frozenset[str] = frozenset(),
    *,
    commits: list[Commit] | None = None,
    checked: Mapping[str, int] | None = None,
) -> dict[str, list[int]]:
    """Every configured sink (but ``skip`` and those failed in this run) publishes what it has
    not published yet, oldest first; returns the versions each sink published.

    ``commits``: the table's log as the caller knows it (it holds the lease: nothing else
    writes it; None lists it). ``checked``: per sink, the version whose target check ran right
    before its commit in this run (the sink's publish leaves out the costly part of its check). A sink
    that fails is recorded in ``ctx.failed`` and stops there; the others go on.
    """
    commits = ctx.state.commits() if commits is None else commits
    done: dict[str, list[int]] = {}
    for sink_id in ctx.sinks:
        if sink_id in skip or sink_id in ctx.failed:
            continue
        for commit in sink_backlog(commits, sink_id):
            verified = (checked or {}).get(sink_id) == commit.version
            if not _publish(ctx, commits, commit, sink_id, verified):
                break
            done.setdefault(sink_id, []).append(commit.version)
    return done


def _publish(
    ctx: RunContext, commits: list[Commit], commit: Commit, sink_id: str, checked: bool
) -> bool:
    """Publish one version to one sink and mark it; False (recorded) when the sink failed."""
    record = commit.record
    ctx.state.check_lease()  # a run frozen past its lease publishes nothing more
    sink = ctx.sinks[sink_id]
    try:
        with error_context(snapshot=None):  # the sink's target, not the snapshot at hand
            sink.publish(
                commit.version,
                record.sinks[sink_id].manifest,
                staging_dir(ctx.state, record, sink_id),
                sink_history(commits, sink_id, upto=commit.version),
                checked=checked,
            )
    except Exception as exc:  # noqa: BLE001 - the sink's disk, server or library: its own
        if under(exc, ctx.state.dir):
            raise  # the state's disk (the staged output, a mark): the state's failure
        failure = sink_error(sink, exc, f"publishing version {commit.version}", commit.version)
        ctx.fail_sink(failure, f"version {commit.version}")
        return False
    crash_point("before_mark_published", scope=sink_id)
    ctx.state.mark_published(commit.version, sink_id, {})  # the state's: its failure is its own
    return True


def failed_sinks_error(ctx: RunContext) -> DiffcdcError:
    """The run's error when sinks failed, a new one summing up their complete errors (which
    stay as they were raised): the first failure's, of its class, naming every failed sink and
    saying that the table's other sinks published; the snapshot at hand, when the sink's error
    names none."""
    first = next(iter(ctx.failed.values()))
    others = [s for s in ctx.sinks if s not in ctx.failed]
    message = first.message
    if len(ctx.failed) > 1:
        message = f"sinks {', '.join(ctx.failed)} failed; {message}"
    if others:
        message += f" (sink(s) {', '.join(others)} published what was committed)"
    error = first.error
    return error.restated(
        message, snapshot=error.snapshot or current_context().snapshot,
        hint=first.disk_hint or error.hint,
    )
