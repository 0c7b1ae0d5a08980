"""Which state files make up a version's state: a base and the deltas on top of it.

A version stores the state it computed in its own folder (``versions/<v>-<run>/state``) in one
of two kinds (the commit record's ``state_parent``):

* a **base** (``state_parent`` None): every key of the version with its fingerprint (and the
  tombstones of the keys it deleted) — a first load, a re-creation, a compaction, a repaired
  version, and every version committed before deltas existed (state format 1 and 2);
* a **delta** on top of version ``state_parent``: only the keys the version inserted, updated
  (with their new fingerprints) and deleted (tombstones).

The state of version V is its chain: walking back through ``state_parent`` to a base, read base
first. Per key the newest link wins; a key whose newest link is a tombstone is not in the state.
A delta costs what changed; compaction (:func:`compaction_due`) writes a base again once the
deltas have grown past a threshold (``[tables.X] state_compaction``), so a chain stays short.
Nothing here needs Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from diffcdc.errors import StateError
from diffcdc.state.integrity import Damage, StateManifest, find_damage
from diffcdc.state.records import Commit
from diffcdc.storage import paths

#: Deltas on top of one base before the next version writes a base again (the default).
MAX_DELTAS = 30
#: Rows in the deltas of a chain, as a share of the base's live rows, before the next version
#: writes a base again (the default).
MAX_DELTA_RATIO = 0.5


@dataclass(frozen=True)
class StateLink:
    """One version's state folder in a chain."""

    version: int
    path: str  #: relative to the table's state folder
    manifest: StateManifest | None  #: None: a version committed before manifests
    delta: bool  #: False: a base (a full state)


def state_chain(commits: Sequence[Commit], version: int | None = None) -> tuple[StateLink, ...]:
    """The links of version ``version``'s state (default: the head), base first."""
    records = {c.version: c.record for c in commits}
    at = version if version is not None else commits[-1].version
    links: list[StateLink] = []
    while True:
        record = records.get(at)
        if record is None:
            wanted = links[-1].version if links else at
            raise StateError(
                f"the state of version {wanted} builds on version {at}, which is not in the "
                "commit log",
                table=commits[-1].record.table if commits else None,
                hint="restore the log from backup, or re-create the table with 'diffcdc reload'",
            )
        links.append(StateLink(record.version, record.state_path, record.state_manifest,
                               record.state_parent is not None))
        if record.state_parent is None:
            return tuple(reversed(links))
        if record.state_parent >= at:
            raise StateError(f"version {at} builds its state on version {record.state_parent}, "
                             "not an earlier one", table=record.table,
                             hint="restore the log from backup")
        at = record.state_parent


def compaction_due(
    chain: Sequence[StateLink], live_rows: int, *, max_deltas: int = MAX_DELTAS,
    max_delta_ratio: float = MAX_DELTA_RATIO,
) -> bool:
    """Whether the version computed on top of ``chain`` writes a base (instead of a delta).

    A base is due when the chain already holds ``max_deltas`` deltas, or its deltas' rows pass
    ``max_delta_ratio`` of the live rows (reading them costs about what writing a base saves), or
    a link has no manifest (its row count is unknown: a version from before manifests).
    """
    deltas = [link for link in chain if link.delta]
    if len(deltas) >= max_deltas:
        return True
    if any(link.manifest is None for link in deltas):
        return True
    delta_rows = sum(link.manifest.rows for link in deltas if link.manifest is not None)
    return delta_rows > max_delta_ratio * max(live_rows, 1)


def chain_damage(
    table_dir: str, chain: Sequence[StateLink], *, checksums: bool
) -> tuple[StateLink, Damage] | None:
    """The first damaged link of ``chain`` (base first) and what is wrong, or None."""
    for link in chain:
        damage = find_damage(paths.join(table_dir, link.path), link.manifest, checksums=checksums)
        if damage is not None:
            return link, damage
    return None
