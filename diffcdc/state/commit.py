"""The commit record: what one committed version of a table holds, as a typed object.

A record is written once (compare-and-swap, see :mod:`diffcdc.state.store`) and never edited.
Format 2 keeps the table-level facts (snapshot, keys, schema, fingerprint, counts, state
location, re-creation) and one entry per sink with that sink's manifest; format 3 (this one) adds
where a version's state builds on (``state_parent``: a delta on an earlier version's state; a
format-2 record's state is a whole one, read as a base). Format 1, written
by diffcdc before sinks existed, had the Open Mirroring landing fields at the top level; it is
read as a record with one ``open_mirroring`` sink (:func:`upgrade_format1`), so state written by
an earlier diffcdc keeps working without being rewritten.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from diffcdc.core.normalize import NO_RULES, Normalizers
from diffcdc.state.integrity import StateManifest

STATE_FORMAT = 3
#: Formats this diffcdc reads (older ones are upgraded in memory when read). Format 3 added
#: ``state_parent`` (a version's state may be a delta, :mod:`diffcdc.state.chain`): a diffcdc
#: that reads only 1 and 2 refuses it instead of taking a delta for a whole state.
READABLE_FORMATS = (1, 2, 3)
#: The sink id a format-1 record's landing zone is read as (and a table without ``sinks``).
LEGACY_SINK_ID = "open_mirroring"
#: The folder of a format-1 version that holds its staged landing files (format 2: ``sinks/``).
FORMAT1_STAGING = "landing"
#: Format-1 top-level fields that belong to the Open Mirroring sink's manifest.
_FORMAT1_LANDING_FIELDS = (
    "landing",
    "landing_folder",
    "metadata",
    "metadata_document",
    "landing_schema",
    "codec",
    "drop_timeout",
    "files",
    "sequence",
)


@dataclass(frozen=True)
class Counts:
    """Row counts of one version."""

    rows: int
    inserted: int
    updated: int
    deleted: int
    unchanged: int
    #: Keys the snapshot did not hold that stay, outside its scope (:mod:`diffcdc.core.scope`;
    #: 0 in a record from before scopes).
    kept: int = 0

    @property
    def changed(self) -> int:
        return self.inserted + self.updated + self.deleted


@dataclass(frozen=True)
class ScopeRecord:
    """The scope a version was diffed with (:mod:`diffcdc.core.scope`)."""

    columns: list[str]  #: the ``columns`` part, as the snapshot spells them
    where: str | None  #: the predicate as evaluated (its placeholder filled)
    #: The non-key columns whose values the state keeps, slot 0 first.
    stored: list[str] = field(default_factory=list)
    #: Kept keys whose scope values are not known (never deleted until a snapshot holds them).
    unknown: int = 0


@dataclass(frozen=True)
class Fingerprint:
    version: int
    bits: int


@dataclass(frozen=True)
class Recreate:
    """Why a version re-created the table; ``request`` is the reload request id, if any."""

    reason: str
    request: str | None = None


@dataclass(frozen=True)
class SinkEntry:
    """One sink's part of a commit: its type and the manifest its ``stage`` returned."""

    type: str
    manifest: dict[str, Any]


@dataclass(frozen=True)
class CommitRecord:
    """One committed version of a table."""

    version: int
    table: str
    run_id: str
    snapshot_id: str
    version_dir: str  #: relative to the table's state folder
    state_path: str  #: relative to the table's state folder
    keys: list[str]
    exclude: list[str]
    schema: dict[str, Any]  #: the snapshot's Spark schema (JSON)
    fingerprint: Fingerprint
    counts: Counts
    sinks: dict[str, SinkEntry] = field(default_factory=dict)
    recreate: Recreate | None = None
    snapshot_path: str | None = None
    #: The snapshot's files as they were read, as its source records them (JSON, one object per
    #: file: :mod:`diffcdc.sources.identity`; None: a version from before identities).
    snapshot_identity: tuple[dict[str, Any], ...] | None = None
    #: Every state file with size, rows and checksum (None: a version from before manifests).
    state_manifest: StateManifest | None = None
    #: The version whose state this version's state folder is a delta on (None: a base, a
    #: whole state; every version of formats 1 and 2). See :mod:`diffcdc.state.chain`.
    state_parent: int | None = None
    committed_at: str | None = None
    #: The snapshot's as-of time, ISO 8601 UTC (None: a version from before as-of times).
    snapshot_time: str | None = None
    #: The scope the version was diffed with (None: the snapshot covered the whole table).
    scope: ScopeRecord | None = None
    format: int = STATE_FORMAT
    #: The normalizers the state's fingerprints were computed with, part of the fingerprint's
    #: identity with ``exclude`` (none: a version from before normalizers, or a table without).
    normalize: Normalizers = NO_RULES
    #: Everything a later diffcdc may add; kept when read, written back unchanged.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        extra = out.pop("extra")
        out["normalize"] = self.normalize.to_record()
        if out["scope"] is None:  # a table without a scope writes the record it always did
            del out["scope"]
        if not out["counts"]["kept"]:
            del out["counts"]["kept"]
        return {**extra, **out}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CommitRecord:
        """Parse a record of any readable format (format 1 is upgraded in memory)."""
        data = upgrade_format1(raw) if raw.get("format") == 1 else dict(raw)
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        recreate = data.get("recreate")
        return cls(
            version=int(data["version"]),
            table=str(data["table"]),
            run_id=str(data["run_id"]),
            snapshot_id=str(data["snapshot_id"]),
            version_dir=str(data["version_dir"]),
            state_path=str(data["state_path"]),
            keys=list(data["keys"]),
            exclude=list(data.get("exclude") or []),
            schema=dict(data["schema"]),
            fingerprint=Fingerprint(**data["fingerprint"]),
            counts=Counts(**data["counts"]),
            sinks={
                sid: SinkEntry(str(e["type"]), dict(e.get("manifest") or {}))
                for sid, e in (data.get("sinks") or {}).items()
            },
            recreate=Recreate(str(recreate.get("reason", "")), recreate.get("request"))
            if recreate
            else None,
            snapshot_path=data.get("snapshot_path"),
            snapshot_identity=tuple(dict(f) for f in data["snapshot_identity"])
            if data.get("snapshot_identity") is not None
            else None,
            state_manifest=StateManifest.from_dict(data["state_manifest"])
            if data.get("state_manifest")
            else None,
            state_parent=int(data["state_parent"]) if data.get("state_parent") is not None
            else None,
            committed_at=data.get("committed_at"),
            snapshot_time=data.get("snapshot_time"),
            scope=_scope(data.get("scope")),
            format=int(data.get("format", STATE_FORMAT)),
            normalize=Normalizers.parse(data.get("normalize") or {}),
            extra={k: v for k, v in data.items() if k not in known},
        )


def _scope(raw: dict[str, Any] | None) -> ScopeRecord | None:
    if not raw:
        return None
    return ScopeRecord(list(raw.get("columns") or []), raw.get("where"),
                       list(raw.get("stored") or []), int(raw.get("unknown") or 0))


def upgrade_format1(raw: dict[str, Any]) -> dict[str, Any]:
    """A format-1 record as format 2: its landing fields become the ``open_mirroring`` sink.

    The record keeps ``format: 1`` (it is what is on disk); everything else reads it as a
    format-2 record. The published mark of format 1 (``<v>.published.json``) counts as the
    mark of that sink (see :mod:`diffcdc.state.store`).
    """
    data = {k: v for k, v in raw.items() if k not in _FORMAT1_LANDING_FIELDS}
    manifest = {k: raw.get(k) for k in _FORMAT1_LANDING_FIELDS}
    data["sinks"] = {LEGACY_SINK_ID: {"type": "open_mirroring", "manifest": manifest}}
    return data
