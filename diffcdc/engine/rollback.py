"""``diffcdc rollback``: put a table back to a kept version's snapshot, as a new version.

Nothing published is ever withdrawn (a consumer may have read it): rolling back to version N
publishes, as version H+1, the changes that take every sink from the head's content back to
snapshot N's — the diff of snapshot N against the head state, computed like any run's. So the
snapshot of version N must still be in the source folder, the very file that was read then
(same identity: inode, ctime, size, mtime). The new version records ``rollback_to``; later
snapshots continue after the newest snapshot ever committed, as before.
"""

from __future__ import annotations

import os

from diffcdc.config import TableConfig
from diffcdc.errors import InputRefused, UsageError
from diffcdc.sources.base import PendingSnapshot, Source
from diffcdc.state.requests import ReloadRequest
from diffcdc.state.store import Commit


def rollback_snapshot(
    table: TableConfig, source: Source, commits: list[Commit], version: int,
    reload: ReloadRequest | None,
) -> PendingSnapshot:
    """The snapshot of kept version ``version``, proven to be the very file it was made from
    (``reload``: a pending reload request, which must be carried out first)."""
    target = next((c for c in commits if c.version == version), None)
    if target is None:
        known = ", ".join(str(c.version) for c in commits[-10:]) or "none"
        raise UsageError(f"--to-version {version} is not a committed version (the last ones: "
                         f"{known})", table=table.name)
    if target is commits[-1]:
        raise UsageError(f"version {version} is the head already; nothing to roll back",
                         table=table.name)
    if reload is not None:
        raise UsageError("a reload of this table is pending; finish it first ('diffcdc run')",
                         table=table.name)
    record = target.record
    refuse = f"cannot roll back to version {version}: "
    source.pending([c.snapshot_id for c in commits])  # a folder lists its entries (late ones refused)
    entry = source.again(record.snapshot_id)
    if entry is None or not os.path.exists(entry.path):
        raise InputRefused(refuse + f"its snapshot {record.snapshot_id} is no longer in the "
                           "source folder", table=table.name, path=source.describe(),
                           hint="put the snapshot back, or re-create the table from a snapshot "
                           f"you have (diffcdc reload --table {table.name} --yes)")
    if not source.proven(entry, record.snapshot_identity):
        raise InputRefused(refuse + f"snapshot {record.snapshot_id} is not the file version "
                           f"{version} was made from (replaced or rewritten since, or the "
                           "version predates snapshot identities)", table=table.name,
                           path=entry.path, hint="re-create the table from a snapshot you "
                           f"have (diffcdc reload --table {table.name} --yes)")
    return entry
