"""The table as a sink sees it (no Spark: config and commands use it too)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SinkTable:
    """What a sink knows of its table (identity only; no source, no gate settings)."""

    name: str  #: the diffcdc table name
    keys: tuple[str, ...]  #: key columns as the snapshot spells them
    schema_name: str | None = None  #: optional schema (Open Mirroring: ``<schema>.schema/``)
    exclude: tuple[str, ...] = ()  #: columns left out of the fingerprint (still published)
