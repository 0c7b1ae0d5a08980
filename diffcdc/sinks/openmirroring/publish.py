"""Publishing a committed batch into the landing zone: idempotent, resumable, in order.

A commit (see :mod:`diffcdc.state.store`) freezes the batch: its files are staged in the
sink's staging folder and named in the sink's manifest. Publishing copies them to the landing
folder; running it again (after a crash, or by the next run) creates only what is missing, so
each file lands exactly once.
"""

from __future__ import annotations

from typing import Any

from diffcdc.errors import StateError
from diffcdc.faults import crash_point
from diffcdc.sinks.openmirroring.contract import check_continuation, last_data_mtime
from diffcdc.sinks.openmirroring.landing import (
    PublishItem,
    drop_folder,
    publish_files,
    publish_time_ordered,
    remove_temp_files,
)
from diffcdc.sinks.openmirroring.metadata import (
    metadata_document,
    metadata_item,
    publish_metadata,
)
from diffcdc.storage import paths
from diffcdc.storage.base import ByteStore, join

#: Marks a sink keeps per version in state: ``has(version, what)`` / ``put(version, what)``.
Marks = Any


def staged_items(
    storage: ByteStore, manifest: dict[str, Any], staging_dir: str, table: str, version: int
) -> list[PublishItem]:
    """The manifest's data files as publish items; refuses a staged file that is gone."""
    folder = manifest["landing_folder"]
    items = []
    for f in manifest["files"]:
        local = paths.join(staging_dir, "landing", f["name"])
        if not paths.exists(local) and storage.stat(join(folder, f["name"])) is None:
            raise StateError(
                f"staged file {f['name']} of committed version {version} is missing",
                table=table,
                path=local,
                hint="the state folder was altered; restore it from backup or re-create the table",
            )
        items.append(PublishItem(local, join(folder, f["name"]), f["sha256"], f["bytes"]))
    return items


def publish_batch(
    storage: ByteStore,
    marks: Marks,
    *,
    table: str,
    version: int,
    manifest: dict[str, Any],
    staging_dir: str,
    known: dict[int, tuple[str, int]],
    keys: list[str],
    sink_id: str,
    alone: str | None = None,
) -> int:
    """Publish a committed batch idempotently; returns how many files were newly created.

    ``known`` maps the numbers of files published by earlier versions (since the table was
    last re-created) to their names and sizes. The folder is checked again right before the
    files go in, even right after the sink's check before this version's commit: the
    state's hashing and the other sinks' publishing came in between, and the service ingests a
    file as soon as it lands. ``alone``: the command that publishes a full image to this sink
    alone, named in the hint of a folder that is not where this sink left it.
    """
    folder = manifest["landing_folder"]
    remove_temp_files(storage, folder)
    items = staged_items(storage, manifest, staging_dir, table, version)
    if manifest.get("recreate") and not marks.has(version, "dropped"):
        # Re-creating: the old table folder goes first, and is really gone before anything of
        # the new load appears (a new folder ETag makes the service rebuild the table). Done
        # once per version; a crash before the mark just drops (our own new files) again.
        drop_folder(storage, folder, float(manifest.get("drop_timeout") or 300))
        marks.put(version, "dropped")
    # Right before publishing (protects the folder): changed since the check?
    check_continuation(
        storage,
        folder,
        table=table,
        published_through=manifest["sequence"]["first"] - 1,
        batch={int(f["sequence"]) for f in manifest["files"]},
        known=known,
        alone=alone,
    )
    document = manifest.get("metadata_document") or metadata_document(keys)
    meta = metadata_item(staging_dir, folder, document)
    publish_metadata(storage, meta, table, alone)
    count = {"n": 0}

    def after_each(item: PublishItem, created: bool) -> None:
        count["n"] += 1
        crash_point("publish", count["n"], scope=sink_id)

    if document.get("fileDetectionStrategy"):
        # LastUpdateTimeFileDetection: the service reads files by modification time.
        after = last_data_mtime(storage, folder)
        created = publish_time_ordered(storage, items, after, on_published=after_each,
                                       alone=alone)
    else:
        created = publish_files(storage, items, on_published=after_each, alone=alone)
    return created
