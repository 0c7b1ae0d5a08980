"""The Open Mirroring metadata files (spec §1): a table's ``_metadata.json`` and the landing
root's ``_partnerEvents.json``.

:func:`metadata_document` builds the table's document and :func:`metadata_item` stages it;
:func:`publish_metadata` puts it in place or checks the one in place, and
:func:`check_published_metadata` refuses, before a commit, one that someone else changed.
:func:`ensure_partner_events` writes the partner file once and refuses a different one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from diffcdc.errors import LandingZoneMismatch
from diffcdc.sinks.openmirroring.contract import alone_hint
from diffcdc.sinks.openmirroring.landing import PublishItem, file_sha256, put_staged, read_file
from diffcdc.sinks.openmirroring.text import TextFormat
from diffcdc.storage import paths
from diffcdc.storage.base import ByteStore, join

METADATA_FILE = "_metadata.json"
PARTNER_EVENTS_FILE = "_partnerEvents.json"
LAST_UPDATE_TIME_DETECTION = "LastUpdateTimeFileDetection"


def metadata_document(
    keys: Sequence[str],
    *,
    upsert_default: bool = False,
    last_update_time: bool = False,
    text: TextFormat | None = None,
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The table's ``_metadata.json`` content.

    ``text`` and ``schema`` (a ``SchemaDefinition``) are given for delimited text only. CSV
    relies on the spec's default ``FileFormat``; every other extension says ``DelimitedText``.
    """
    doc: dict[str, Any] = {"keyColumns": list(keys)}
    if last_update_time:
        doc["fileDetectionStrategy"] = LAST_UPDATE_TIME_DETECTION
    if upsert_default:
        doc["isUpsertDefaultRowMarker"] = True
    if text is not None:
        if text.extension.lower() != "csv":
            doc["FileFormat"] = "DelimitedText"
        doc["FileExtension"] = text.extension
        doc["SchemaDefinition"] = schema or {"Columns": []}
        doc["FileFormatTypeProperties"] = text.properties()
    return doc


def metadata_item(staging_dir: str, folder: str, document: dict[str, Any]) -> PublishItem:
    """Stage ``_metadata.json`` for publishing."""
    path = paths.join(staging_dir, METADATA_FILE)
    paths.write_bytes(path, json.dumps(document, indent=2).encode("utf-8"))
    return PublishItem(path, join(folder, METADATA_FILE), file_sha256(path), paths.size(path))


def check_published_metadata(
    storage: ByteStore, folder: str, manifest: dict[str, Any], table: str,
    alone: str | None = None,
) -> None:
    """Before a commit: the table's ``_metadata.json`` is still the one we published.

    Someone else's edit is refused here, before anything is committed, not at publish time.
    A missing file is put back by the next publish. ``alone``: the command that publishes a
    full image to this sink alone (named in the hint).
    """
    ours = manifest.get("metadata_document")
    target = join(folder, METADATA_FILE)
    if ours is None or storage.stat(target) is None:
        return
    existing = _published_json(storage, target)
    if existing != ours:
        raise LandingZoneMismatch(
            f"_metadata.json in the landing zone was changed by someone else (it is "
            f"{existing}, this engine published {ours})",
            table=table,
            path=f"{storage.describe()}/{target}",
            hint=alone_hint("put back the published content (the table's consumer may already "
                            f"have read it), or re-create the table (diffcdc reload --table "
                            f"{table} --yes)", alone),
        )


def _published_json(storage: ByteStore, path: str) -> Any:
    """The JSON document at ``path`` in the landing zone; None when it is not valid JSON (it
    then differs from anything this engine wrote)."""
    try:
        return json.loads(read_file(storage, path))
    except ValueError:
        return None


def publish_metadata(storage: ByteStore, item: PublishItem, table: str,
                     alone: str | None = None) -> None:
    """Put ``_metadata.json`` in place, or check that the one in place agrees with ours
    (``alone``: the command that publishes a full image to this sink alone, for the hint)."""
    if storage.stat(item.target) is None:
        try:
            put_staged(storage, item.local_path, item.target)
            return
        except FileExistsError:
            pass
    try:
        existing = json.loads(read_file(storage, item.target))
    except ValueError:
        raise LandingZoneMismatch(
            "_metadata.json in the landing zone is not valid JSON",
            table=table,
            path=item.target,
            hint=alone_hint("fix or remove it (diffcdc reload re-creates the table)", alone),
        ) from None
    ours = json.loads(paths.read_bytes(item.local_path).decode("utf-8"))
    if existing.get("keyColumns") != ours.get("keyColumns"):
        raise LandingZoneMismatch(
            f"keyColumns in the landing zone are {existing.get('keyColumns')}, this table has "
            f"{ours.get('keyColumns')}; keyColumns can never change once published",
            table=table,
            path=item.target,
            hint=alone_hint("re-create the table (diffcdc reload) to change its keys", alone),
        )
    if existing != ours:
        fields = sorted(k for k in {*existing, *ours} if existing.get(k) != ours.get(k))
        raise LandingZoneMismatch(
            f"_metadata.json in the landing zone differs from this table's settings in "
            f"{', '.join(fields)} ({existing} vs {ours})",
            table=table,
            path=item.target,
            hint=alone_hint("change the table settings back, or re-create the table (diffcdc "
                            "reload)", alone),
        )


def ensure_partner_events(
    storage: ByteStore, document: dict[str, Any], staging_dir: str, table: str
) -> bool:
    """Write ``_partnerEvents.json`` at the landing root once; refuse a different one.

    Returns True when this call created it. The spec asks for one ``partnerName`` everywhere,
    so a file with other content is an error, never overwritten.
    """
    paths.makedirs(staging_dir)
    path = paths.join(staging_dir, PARTNER_EVENTS_FILE)
    paths.write_bytes(path, json.dumps(document, indent=2).encode("utf-8"))
    if storage.stat(PARTNER_EVENTS_FILE) is None:
        try:
            put_staged(storage, path, PARTNER_EVENTS_FILE)
            return True
        except FileExistsError:
            pass
    existing = _published_json(storage, PARTNER_EVENTS_FILE)
    if existing != document:
        raise LandingZoneMismatch(
            f"{PARTNER_EVENTS_FILE} at the landing root says {json.dumps(existing)}, this "
            f"table's [partner] settings say {json.dumps(document)}",
            table=table,
            path=f"{storage.describe()}/{PARTNER_EVENTS_FILE}",
            hint="keep partner settings the same for every table of a landing zone; if the "
            "file is stale, delete it and run again",
        )
    return False
