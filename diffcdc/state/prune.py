"""Housekeeping of a table's version folders (``versions/`` under its data folder)."""

from __future__ import annotations

import os
import shutil

from diffcdc.state.store import TableState


def prune_versions(state: TableState, keep_versions: int) -> list[str]:
    """Remove abandoned version folders and state versions beyond the retention.

    Only called while holding the lock, so an uncommitted folder is never one being
    written. Staged landing files of published versions are removed too (they live in the
    landing zone now).
    """
    removed = []
    commits = state.commits()
    committed = {c.record.version_dir: c for c in commits}
    keep = {c.record.version_dir for c in commits[-max(1, keep_versions):]}
    try:
        names = os.listdir(state.versions_dir)
    except FileNotFoundError:
        return removed
    for name in names:
        rel = f"versions/{name}"
        commit = committed.get(rel)
        path = os.path.join(state.versions_dir, name)
        if commit is None or rel not in keep:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(rel)
        elif commit.published:
            for staged in ("landing", "sinks", "changes"):  # published: only state is kept
                shutil.rmtree(os.path.join(path, staged), ignore_errors=True)
            for entry in os.listdir(path):  # state folders a repair replaced
                if entry.startswith("state") and f"{rel}/{entry}" != commit.record.state_path:
                    shutil.rmtree(os.path.join(path, entry), ignore_errors=True)
    return removed
