"""The Open Mirroring landing zone (spec §1): table folders, data file names, continuation.

This module names table folders and sequence-numbered data files and checks that a landing
folder continues what the state says was published (:func:`check_continuation`). The rest of
the landing contract is beside it: :mod:`~diffcdc.sinks.openmirroring.rows` (what the rows of
a data file hold), :mod:`~diffcdc.sinks.openmirroring.staging` (a change set staged as
final-named files) and :mod:`~diffcdc.sinks.openmirroring.metadata` (``_metadata.json`` and
``_partnerEvents.json``). They know the landing contract; the
:class:`~diffcdc.storage.base.ByteStore` they go through knows only bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from diffcdc.errors import LandingZoneMismatch
from diffcdc.storage.base import ByteStore, join

#: Folders the mirroring service moves processed files into (inside the table folder).
CLEANUP_FOLDERS = ("_ProcessedFiles", "_FilesReadyToDelete")
_SEQ_RE = re.compile(r"^(\d{20})\.([A-Za-z0-9]+)$")


def table_folder(table: str, schema_name: str | None = None) -> str:
    """``<Table>`` or ``<schema>.schema/<Table>``, relative to the landing root."""
    return join(f"{schema_name}.schema", table) if schema_name else table


def data_file_name(sequence: int, extension: str = "parquet") -> str:
    return f"{sequence:020d}.{extension}"


def sequence_numbers(storage: ByteStore, folder: str) -> dict[int, str]:
    """Every sequence-named file of a table: number → where it is (folder relative path)."""
    return {n: path for n, (path, _) in _sequence_files(storage, folder).items()}


def _sequence_files(storage: ByteStore, folder: str) -> dict[int, tuple[str, int]]:
    found: dict[int, tuple[str, int]] = {}
    for sub in ("", *CLEANUP_FOLDERS):
        where = join(folder, sub)
        for info in storage.list(where):
            match = _SEQ_RE.match(info.name)
            if match:
                found[int(match.group(1))] = (join(where, info.name), info.size)
    return found


def known_files(manifests: Sequence[dict[str, Any]]) -> dict[int, tuple[str, int]]:
    """Number → (name, bytes) of every file in these manifests (since the last re-creation)."""
    out: dict[int, tuple[str, int]] = {}
    for manifest in manifests:
        for f in manifest.get("files") or []:
            out[int(f["sequence"])] = (f["name"], int(f["bytes"]))
    return out


def last_data_mtime(storage: ByteStore, folder: str) -> float:
    """The newest modification time of a data file in the table folder (0 when none)."""
    times = [i.mtime for i in storage.list(folder) if _SEQ_RE.match(i.name)]
    return max(times, default=0.0)


def alone_hint(hint: str, alone: str | None) -> str:
    """``hint`` and, when given, the recovery that leaves the table's other sinks alone
    (``alone``: the command that publishes a full image to this sink alone)."""
    return f"{hint}; or publish a full image to this sink alone: '{alone}'" if alone else hint


def check_continuation(
    storage: ByteStore,
    folder: str,
    *,
    table: str,
    published_through: int,
    batch: set[int] | frozenset[int] = frozenset(),
    known: dict[int, tuple[str, int]] | None = None,
    alone: str | None = None,
) -> None:
    """Refuse a landing folder that does not match what the state says was published.

    ``published_through`` is the highest sequence number this engine published for the
    table (0 for none); the next number is one more. The table folder and both cleanup
    folders are searched. Numbers above it that are not part of the batch being published
    were written by someone else; a folder without any file at or above it lost files we
    wrote (the service always keeps the last processed file). ``known`` (number → name and
    size of the files we wrote) also exposes a foreign file under one of our numbers.
    ``alone``: the command that publishes a full image to this sink alone (named in the hint).
    """
    found = _sequence_files(storage, folder)
    numbers = {n: path for n, (path, _) in found.items()}
    foreign = sorted(n for n in numbers if n > published_through and n not in batch)
    for number, (name, size) in sorted((known or {}).items()):
        if number in found and number <= published_through:
            path, info_size = found[number]
            if path.rsplit("/", 1)[-1] != name or info_size != size:
                foreign.insert(0, number)
                break
    where = f"{storage.describe()}/{folder}"
    if foreign:
        raise LandingZoneMismatch(
            f"landing folder holds file number {foreign[0]} that this engine never wrote "
            f"(state has published up to {published_through})",
            table=table,
            path=numbers[foreign[0]],
            hint=alone_hint(
                f"another publisher writes into {where}; stop it, or re-create the table "
                f"(diffcdc reload --table {table} --yes) to start a fresh initial load"
                if published_through
                else "nothing was published here from this state: if the table was published "
                "with another state root, run from the folder that holds it or give --state (or "
                f"the config file's state); if another publisher writes into {where}, stop it",
                alone),
        )
    if published_through > 0 and not any(n >= published_through for n in numbers):
        raise LandingZoneMismatch(
            f"landing folder lost files this engine published (last was number "
            f"{published_through}; none at or above it remain)",
            table=table,
            path=where,
            hint=alone_hint("the table folder was deleted or re-created by someone else; "
                            f"re-create the table (diffcdc reload --table {table} --yes) to "
                            "publish a fresh initial load", alone),
        )

