"""Publishing a committed batch into the landing zone: idempotent, resumable, in order.

A commit (see :mod:`diffcdc.state.store`) freezes the batch: its files are staged in the version
folder and named in the commit record. Publishing copies them to the landing folder; running
it again (after a crash, or by the next run) creates only what is missing, so each file lands
exactly once.
"""

from __future__ import annotations

import os

from diffcdc.errors import StateError
from diffcdc.faults import crash_point
from diffcdc.sinks.openmirroring.contract import (
    check_continuation,
    known_files,
    last_data_mtime,
    metadata_document,
    metadata_item,
    publish_metadata,
)
from diffcdc.sinks.storage.base import LandingStorage, PublishItem, join
from diffcdc.state.store import Commit, TableState


def publish_commit(state: TableState, storage: LandingStorage, commit: Commit) -> int:
    """Publish a committed batch idempotently; returns how many files were newly created."""
    record = commit.record
    folder = record["landing_folder"]
    vdir = state.abspath(record["version_dir"])
    storage.remove_temp_files(folder)
    items = []
    for f in record["files"]:
        local = os.path.join(vdir, "landing", f["name"])
        if not os.path.exists(local) and storage.stat(join(folder, f["name"])) is None:
            raise StateError(
                f"staged file {f['name']} of committed version {commit.version} is missing",
                table=record["table"],
                path=local,
                hint="the state folder was altered; restore it from backup or re-create the table",
            )
        items.append(PublishItem(local, join(folder, f["name"]), f["sha256"], f["bytes"]))
    if record.get("recreate") and not state.is_dropped(commit.version):
        # Re-creating: the old table folder goes first, and is really gone before anything of
        # the new load appears (a new folder ETag makes the service rebuild the table). Done
        # once per version; a crash before mark_dropped just drops (our own new files) again.
        storage.drop_folder(folder, float(record.get("drop_timeout") or 300))
        state.mark_dropped(commit.version)
    check_continuation(
        storage,
        folder,
        table=record["table"],
        published_through=record["sequence"]["first"] - 1,
        batch={int(f["sequence"]) for f in record["files"]},
        known=known_files([c for c in state.commits() if c.version < commit.version]),
    )
    document = record.get("metadata_document") or metadata_document(record["keys"])
    meta = metadata_item(vdir, folder, document)
    publish_metadata(storage, meta, record["table"])
    published = {"n": 0}

    def after_each(item: PublishItem, created: bool) -> None:
        published["n"] += 1
        crash_point("publish", published["n"])

    if document.get("fileDetectionStrategy"):
        # LastUpdateTimeFileDetection: the service reads files by modification time.
        after = last_data_mtime(storage, folder)
        created = storage.publish_time_ordered(items, after, on_published=after_each)
    else:
        created = storage.publish_files(items, on_published=after_each)
    crash_point("before_mark_published")
    state.mark_published(commit.version, {"files_created": created})
    return created
