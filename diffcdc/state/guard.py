"""The head state is checked before a run diffs against it; a damaged one is refused.

The check is the cheap one (sizes, footers, no stray files: see
:mod:`diffcdc.state.integrity`); the message names the file, the version and both ways out:
rebuild the version's state (``diffcdc repair``, exact, no sink touched) or re-create the
table (``diffcdc reload``, every sink gets a full image).
"""

from __future__ import annotations

from diffcdc.errors import StateError
from diffcdc.state.commit import CommitRecord
from diffcdc.state.integrity import Damage, find_damage
from diffcdc.state.store import TableState


def repair_hint(table: str, record: CommitRecord) -> str:
    return (
        f"rebuild it from snapshot {record.snapshot_id} with 'diffcdc repair --table {table}' "
        "(the snapshot must still be in the source folder, unchanged), or re-create the table "
        f"with 'diffcdc reload --table {table} --yes' (every sink gets a full image)"
    )


def state_damage(state: TableState, record: CommitRecord, *, checksums: bool) -> Damage | None:
    """What is wrong with ``record``'s state files, or None."""
    return find_damage(state.abspath(record.state_path), record.state_manifest, checksums=checksums)


def check_head_state(state: TableState, record: CommitRecord) -> None:
    """Refuse to diff against a damaged state version (sizes and footers; no full read)."""
    damage = state_damage(state, record, checksums=False)
    if damage is not None:
        raise StateError(
            f"state version {record.version} is damaged: {damage.reason}",
            table=record.table,
            path=damage.path,
            hint=repair_hint(record.table, record),
        )
