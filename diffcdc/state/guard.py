"""The head state is checked before a run diffs against it; a damaged one is refused.

The check is the cheap one (sizes, footers, no stray files: see
:mod:`diffcdc.state.integrity`), made on every link of the state's chain (its base and deltas,
:mod:`diffcdc.state.chain`); the message names the file, the version and both ways out:
rebuild the version's state (``diffcdc repair``, exact, no sink touched) or re-create the
table (``diffcdc reload``, every sink gets a full image).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

from diffcdc.errors import StateError
from diffcdc.state.chain import chain_damage, state_chain
from diffcdc.state.commit import CommitRecord
from diffcdc.state.integrity import Damage
from diffcdc.state.records import Commit
from diffcdc.state.store import TableState
from diffcdc.storage import paths


def repair_hint(state: TableState, record: CommitRecord) -> str:
    """Both ways out, each a command that works as printed (with a local state root)."""
    table, schema = record.table, _schema_of(state.table, record.table)
    where = f" --table {shlex.quote(table)}" + (f" --schema {shlex.quote(schema)}" if schema else "")
    if state.location.remote:  # a URL state root needs the config's state_data
        where = f" --config <the config file> --table {shlex.quote(table)}"
    else:
        where += f" --state {shlex.quote(state.location.location)}"
    reload = (f"re-create the table with 'diffcdc reload{where} --yes' and the table's run "
              "options (every sink gets a full image)")
    source = _source_folder(state, record)
    if source is None:  # a database or DataFrame source: its snapshot cannot be read again
        return reload
    if not state.location.remote:
        where += f" --source {shlex.quote(source)}"
    head = state.head()
    instead = (f", or else the head's snapshot {head.snapshot_id}" if head is not None
               and head.version != record.version else "")
    return (f"rebuild it with 'diffcdc repair{where}' (exact, no sink is touched; it reads "
            f"snapshot {record.snapshot_id}{instead}, which must still be in the source folder, "
            f"unchanged), or {reload}")


def _schema_of(folder: str, table: str) -> str | None:
    """The schema of ``table`` whose state folder is ``folder`` (``<schema>.schema.<table>``)."""
    suffix = ".schema." + table
    return folder[: -len(suffix)] if folder != table and folder.endswith(suffix) else None


def _source_folder(state: TableState, record: CommitRecord) -> str | None:
    """The source folder the version's snapshot was read from; None for a database or
    DataFrame source (its snapshot was a copy under the state) or an older record."""
    path = record.snapshot_path
    if not path or paths.is_url(path):
        return None
    full = os.path.abspath(path)  # a relative --source: relative to where the run was started
    inside = (state.location.data, state.location.location)
    if any(full == root or full.startswith(root.rstrip("/") + "/") for root in inside):
        return None
    folder = os.path.dirname(path.rstrip("/"))
    return folder if folder and os.path.isdir(folder) else None  # not "a Spark DataFrame"


def state_damage(
    state: TableState, commits: Sequence[Commit], version: int | None = None, *, checksums: bool
) -> tuple[CommitRecord, Damage] | None:
    """What is wrong with the state of ``version`` (default: the head) — the first damaged link
    of its chain (base first) as that link's commit record and the damage — or None."""
    found = chain_damage(state.dir, state_chain(commits, version), checksums=checksums)
    if found is None:
        return None
    link, damage = found
    return next(c.record for c in commits if c.version == link.version), damage


def check_head_state(state: TableState, commits: Sequence[Commit], version: int) -> None:
    """Refuse to diff against a damaged state (every link of version ``version``'s chain: sizes
    and footers, no full read)."""
    found = state_damage(state, commits, version, checksums=False)
    if found is not None:
        record, damage = found
        raise StateError(
            f"state version {record.version} is damaged: {damage.reason}",
            table=record.table,
            path=damage.path,
            hint=repair_hint(state, record),
        )


_FILE_URI = re.compile(r"file:(?://)?(/[^\s'\"\],;]+)")
_ROOT_CAUSE = re.compile(r"^(?:Caused by: )?(?:\S+(?:Exception|Error)): (.+)$", re.M)


def unreadable_state(text: str, state: TableState) -> StateError | None:
    """A read that failed on one of the table's own state files (a checksum that fails, bytes
    a decoder refuses: damage the run's quick check cannot see) as that state version's error,
    with the ways out (``diffcdc repair`` first); None when no state file is named in ``text``
    (the error of a Spark job, whose trace names the files it could not read)."""
    root = os.path.abspath(state.dir).rstrip("/") + "/"
    files = [p.rstrip(".") for p in _FILE_URI.findall(text) if p.startswith(root)]
    if not files or paths.is_url(state.dir):
        return None
    path = files[0]
    commits = state.commits()
    record = next((c.record for c in reversed(commits)
                   if path.startswith(state.abspath(c.record.state_path).rstrip("/") + "/")),
                  None)
    if record is None:
        return None
    causes = [c.strip() for c in _ROOT_CAUSE.findall(text) if "calling o" not in c]
    reason = (causes[-1] if causes else text.strip().splitlines()[0])
    reason = re.sub(r"file:(?://)?" + re.escape(path), os.path.basename(path), reason)[:300]
    return StateError(
        f"state version {record.version} is damaged: one of its files cannot be read ({reason})",
        table=record.table,
        path=path,
        hint=repair_hint(state, record),
    )
