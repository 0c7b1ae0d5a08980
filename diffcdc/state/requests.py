"""A table's pending operator requests: re-creating and dropping the table.

Under the table's folder: ``reload.json`` (the next commit must re-create the table, or with
``sinks`` give just those sinks a full image; kept until a commit has carried it out) and ``drop.json`` (a drop of the landing folder has started; runs
refuse the table until ``diffcdc drop`` finishes it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from diffcdc.errors import StateError
from diffcdc.state.records import Commit, encode_json, now_iso
from diffcdc.storage.base import ByteStore


@dataclass(frozen=True)
class ReloadRequest:
    """``reload.json``: the next commit re-creates the table, or with :attr:`sinks` gives just
    those sinks a full image; a commit that does so names :attr:`id`."""

    id: str
    requested_at: str = ""
    reason: str = "reload"
    #: The sinks to start afresh (``diffcdc reload --sink``); empty: the whole table.
    sinks: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReloadRequest:
        return cls(str(data["id"]), str(data.get("requested_at", "")),
                   str(data.get("reason", "reload")), tuple(data.get("sinks") or ()))

    def to_dict(self) -> dict[str, Any]:
        """The document as written (``sinks`` only when some are named)."""
        out: dict[str, Any] = {"id": self.id, "requested_at": self.requested_at,
                               "reason": self.reason}
        if self.sinks:
            out["sinks"] = list(self.sinks)
        return out

    def starts_afresh(self, sinks: Iterable[str]) -> frozenset[str]:
        """Which of the configured ``sinks`` this request gives a full image."""
        configured = frozenset(sinks)
        return frozenset(self.sinks) & configured if self.sinks else configured


def reload_wanted(
    pending: ReloadRequest | None, reason: str, sinks: Sequence[str] = ()
) -> ReloadRequest:
    """The reload request once the table (or, with ``sinks``, just those sinks) is asked to be
    started afresh; ``pending`` itself when it covers that already.

    A pending request is widened, never narrowed: a reload of the table stays one, and sinks
    asked for are added to a pending reload of other sinks.
    """
    if pending is not None:
        if not pending.sinks or (sinks and set(sinks) <= set(pending.sinks)):
            return pending
        if not sinks:  # the whole table now: widen to it
            return replace(pending, sinks=())
        sinks = sorted(set(pending.sinks) | set(sinks))
    return ReloadRequest(uuid.uuid4().hex, now_iso(), reason, tuple(sorted(sinks)))


class TableRequests:
    """The reload and drop requests of one table, in its document storage.

    ``commits`` returns the table's committed versions (oldest first): a reload request is
    carried out once a commit names it.
    """

    RELOAD = "reload.json"
    DROP = "drop.json"

    def __init__(self, storage: ByteStore, commits: Callable[[], list[Commit]]) -> None:
        self.storage = storage
        self.commits = commits

    @property
    def reload_path(self) -> str:
        return self.storage.describe(self.RELOAD)

    @property
    def drop_path(self) -> str:
        return self.storage.describe(self.DROP)

    def save_reload(self, request: ReloadRequest) -> None:
        """Record the reload request (kept until a commit carries it out)."""
        self.storage.put(self.RELOAD, encode_json(request.to_dict()))

    def pending_reload(self) -> ReloadRequest | None:
        """The pending reload request, or None (also once a commit has carried it out); read
        only (plan and status take no lock, write nothing)."""
        request = self._read_reload()
        return None if request is None or self._carried_out(request) else request

    def _read_reload(self) -> ReloadRequest | None:
        """``reload.json``, or None; a damaged one is a :class:`StateError` (one line)."""
        try:
            request = self.storage.read_json(self.RELOAD)
        except ValueError as exc:
            problem = f"is not valid JSON ({exc})"
        else:
            if request is None:
                return None
            if isinstance(request, dict) and isinstance(request.get("id"), str):
                return ReloadRequest.from_dict(request)
            problem = "is not a reload request (a JSON object with an id)"
        raise StateError(
            f"the table's reload request {problem}",
            path=self.reload_path,
            hint="delete that file, then ask for the re-creation again with 'diffcdc reload' "
            "if the table is to be re-created",
        )

    def _carried_out(self, request: ReloadRequest) -> bool:
        """Whether a commit has re-created the table (or its named sinks) for this request."""
        ident = request.id
        return any(
            (c.record.recreate is not None and c.record.recreate.request == ident)
            or any(e.manifest.get("reload") == ident for e in c.record.sinks.values())
            for c in self.commits()
        )

    def remove_carried_out(self) -> None:
        """Remove a reload request a commit has carried out (a crash right after that commit
        left the file behind)."""
        request = self._read_reload() if self.has_reload_request() else None
        if request is not None and self._carried_out(request):
            self.storage.delete(self.RELOAD)

    def clear_reload_request(self) -> None:
        self.storage.delete(self.RELOAD)

    def has_reload_request(self) -> bool:
        return self.storage.exists(self.RELOAD)

    def request_drop(self, folder: str) -> None:
        """Record that a drop of the landing folder ``folder`` has started."""
        self.storage.put(self.DROP, encode_json({"requested_at": now_iso(), "folder": folder}))

    def has_drop_request(self) -> bool:
        return self.storage.exists(self.DROP)
