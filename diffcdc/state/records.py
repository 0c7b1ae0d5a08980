"""What the state log holds, apart from its store: committed versions, sink marks, and the
small helpers every state document uses (timestamps, run ids, JSON encoding)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from diffcdc.state.commit import LEGACY_SINK_ID, CommitRecord
from diffcdc.storage.base import ByteStore


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def encode_json(document: Any) -> bytes:
    return json.dumps(document, indent=1, sort_keys=True, default=str).encode("utf-8")


def report_changed(report: dict[str, Any]) -> bool:
    """Whether a run report committed a snapshot or finished publishing a version."""
    return bool(report.get("snapshots") or report.get("resumed_versions"))


@dataclass(frozen=True)
class Commit:
    """A committed version of a table and which of its sinks have published it."""

    record: CommitRecord
    published_sinks: frozenset[str]

    @property
    def version(self) -> int:
        return self.record.version

    @property
    def snapshot_id(self) -> str:
        return self.record.snapshot_id

    @property
    def unpublished(self) -> list[str]:
        """Sink ids of this version still to publish, in commit order."""
        return [s for s in self.record.sinks if s not in self.published_sinks]

    @property
    def published(self) -> bool:
        return not self.unpublished


def sink_chain(commits: list[Commit], sink_id: str, upto: int | None = None) -> list[Commit]:
    """The versions of a sink's current history, oldest first: walking back from ``upto``
    (default: the head), up to the version where it last started from nothing (a re-created
    table or a full image for it, included), or to a version it was not part of (excluded: a
    sink missing from the newest version has no history and starts again from a full image)."""
    out = []
    for commit in reversed(commits):
        if upto is not None and commit.version > upto:
            continue
        entry = commit.record.sinks.get(sink_id)
        if entry is None:
            break
        out.append(commit)
        if commit.record.recreate is not None or entry.manifest.get("initial"):
            break
    return out[::-1]


def sink_backlog(commits: list[Commit], sink_id: str) -> list[Commit]:
    """The versions of the sink's current history (since it last started from a full image)
    that it has not published yet, oldest first."""
    return [c for c in sink_chain(commits, sink_id) if sink_id not in c.published_sinks]


class SinkMarks:
    """Facts a sink records once per version: ``log/<version>.<what>.<sink>.json``."""

    def __init__(self, storage: ByteStore, sink_id: str) -> None:
        self.storage = storage
        self.sink_id = sink_id

    def _paths(self, version: int, what: str) -> list[str]:
        paths = [f"log/{version:020d}.{what}.{self.sink_id}.json"]
        if self.sink_id == LEGACY_SINK_ID:  # format 1 wrote ``<version>.<what>.json``
            paths.append(f"log/{version:020d}.{what}.json")
        return paths

    def has(self, version: int, what: str) -> bool:
        return any(self.storage.exists(p) for p in self._paths(version, what))

    def put(self, version: int, what: str) -> None:
        with contextlib.suppress(FileExistsError):
            self.storage.put_if_absent(
                self._paths(version, what)[0], encode_json({"version": version, what: now_iso()})
            )
