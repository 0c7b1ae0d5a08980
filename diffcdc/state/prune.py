"""Housekeeping of a table's version folders (``versions/`` under its data folder)."""

from __future__ import annotations

from diffcdc.state.chain import state_chain
from diffcdc.state.commit import FORMAT1_STAGING
from diffcdc.state.records import sink_chain
from diffcdc.state.store import Commit, TableState
from diffcdc.storage import paths


def prune_versions(
    state: TableState, keep_versions: int, commits: list[Commit] | None = None
) -> list[str]:
    """Remove abandoned version folders and state versions beyond the retention.

    Only called while holding the lock, so an uncommitted folder is never one being
    written. A version a sink still has to publish is kept whatever its age, and so is every
    folder the state of a kept version builds on (its base and deltas, see
    :mod:`diffcdc.state.chain`). What published versions staged for their sinks is removed too
    (it lives in the sinks' targets now). ``commits``: the table's log, when the caller (holding
    the lock) has just listed it.
    """
    removed = []
    commits = state.commits() if commits is None else commits
    committed = {c.record.version_dir: c for c in commits}
    kept = commits[-max(1, keep_versions):]
    keep = {c.record.version_dir for c in kept}
    folders = {c.version: c.record.version_dir for c in commits}
    for commit in kept:  # the state of a kept version is its chain
        keep.update(folders[link.version] for link in state_chain(commits, commit.version))
    # A sink that failed catches up later, in order: what it has yet to publish stays.
    for sink_id in {s for c in commits for s in c.unpublished}:
        keep.update(c.record.version_dir for c in sink_chain(commits, sink_id)
                    if sink_id not in c.published_sinks)
    for name in paths.listdir(state.versions_dir):
        rel = f"versions/{name}"
        commit = committed.get(rel)
        path = paths.join(state.versions_dir, name)
        if commit is None or rel not in keep:
            paths.remove_tree(path)
            removed.append(rel)
        elif commit.published:
            for staged in (FORMAT1_STAGING, "sinks", "changes"):  # published: only state is kept
                paths.remove_tree(paths.join(path, staged))
            for entry in paths.listdir(path):  # state folders a repair replaced
                if entry.startswith("state") and f"{rel}/{entry}" != commit.record.state_path:
                    paths.remove_tree(paths.join(path, entry))
    return removed
