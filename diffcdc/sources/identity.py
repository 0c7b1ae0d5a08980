"""A folder snapshot's identity: what identifies its files' bytes without reading them.

Taken before the first read and again right before the commit (a snapshot replaced or
rewritten in place in between is refused), and recorded in the commit as JSON
(``snapshot_identity``: the state keeps it without knowing its shape), so that ``rollback``,
``repair`` and ``verify --state`` can prove a snapshot is still the one a version was made from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from diffcdc.errors import InputRefused


@dataclass(frozen=True)
class FileIdentity:
    """What identifies one snapshot file's bytes without reading them.

    Size and mtime can be put back by whoever rewrites a file in place; the inode changes when
    a file is replaced and the ctime whenever its content or metadata changes, and neither can
    be set by a user. ``name`` is relative to the snapshot entry ("" for a single file).
    """

    name: str
    bytes: int
    mtime_ns: int
    ctime_ns: int
    inode: int


def identity_record(identity: Sequence[FileIdentity]) -> tuple[dict[str, Any], ...]:
    """An identity as the commit records it (JSON)."""
    return tuple(asdict(f) for f in identity)


def identity_of_record(record: Sequence[Mapping[str, Any]]) -> tuple[FileIdentity, ...]:
    """An identity a commit recorded, typed again."""
    return tuple(FileIdentity(**f) for f in record)


def identify(path: str, table: str | None = None, snapshot: str | None = None) -> tuple[FileIdentity, ...]:
    """The identity of a snapshot's files (see :class:`FileIdentity`), taken without reading them.

    Taken before the first read and again right before the commit: a snapshot replaced or
    rewritten in place in between, even with its size and mtime put back, is refused.
    """
    try:
        if not os.path.isdir(path):
            return (_identity("", os.stat(path)),)
        out = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                out.append(_identity(os.path.relpath(full, path), os.stat(full)))
        return tuple(out)
    except OSError as exc:
        raise InputRefused(
            f"cannot read snapshot: {exc.strerror or exc}"
            + (" (a link to a file that does not exist)" if os.path.islink(path) else ""),
            table=table,
            snapshot=snapshot,
            path=exc.filename or path,
            hint="fix the snapshot or move it out of the source folder",
        ) from None


def same_files(path: str, recorded: Sequence[Mapping[str, Any]] | None, table: str | None = None,
               snapshot: str | None = None) -> bool:
    """Whether the snapshot at ``path`` is still the files a commit recorded (False: the commit
    recorded no identity, or they were replaced or rewritten since). Raises ``InputRefused``
    when the snapshot cannot be read."""
    return recorded is not None and identify(path, table, snapshot) == identity_of_record(recorded)


def _identity(name: str, st: os.stat_result) -> FileIdentity:
    return FileIdentity(name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
