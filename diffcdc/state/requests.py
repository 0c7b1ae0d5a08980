"""A table's pending operator requests: re-creating and dropping the table.

Under the table's folder: ``reload.json`` (the next commit must re-create the table; kept until
a commit has carried it out) and ``drop.json`` (a drop of the landing folder has started; runs
refuse the table until ``diffcdc drop`` finishes it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from diffcdc.state.records import Commit, encode_json, now_iso
from diffcdc.state.storage.base import StateStorage


class TableRequests:
    """The reload and drop requests of one table, in its document storage.

    ``commits`` returns the table's committed versions (oldest first): a reload request is
    carried out once a commit names it.
    """

    RELOAD = "reload.json"
    DROP = "drop.json"

    def __init__(self, storage: StateStorage, commits: Callable[[], list[Commit]]) -> None:
        self.storage = storage
        self.commits = commits

    @property
    def reload_path(self) -> str:
        return self.storage.describe(self.RELOAD)

    @property
    def drop_path(self) -> str:
        return self.storage.describe(self.DROP)

    def request_reload(self, reason: str) -> dict[str, Any]:
        """Record that the next commit must re-create the table (kept until it is committed)."""
        existing = self.reload_request()
        if existing is not None:
            return existing
        request = {"id": uuid.uuid4().hex, "requested_at": now_iso(), "reason": reason}
        self.storage.put(self.RELOAD, encode_json(request))
        return request

    def reload_request(self) -> dict[str, Any] | None:
        """The pending reload request, or None (also once a commit has carried it out)."""
        request = self.storage.read_json(self.RELOAD)
        if request is None:
            return None
        if self.reload_carried_out(request):
            self.storage.delete(self.RELOAD)  # a crash right after the commit left it behind
            return None
        return dict(request)

    def reload_carried_out(self, request: dict[str, Any]) -> bool:
        """Whether a commit has re-created the table for this reload request."""
        return any(
            c.record.recreate is not None and c.record.recreate.request == request.get("id")
            for c in self.commits()
        )

    def clear_reload_request(self) -> None:
        self.storage.delete(self.RELOAD)

    def has_reload_request(self) -> bool:
        return self.storage.exists(self.RELOAD)

    def request_drop(self, folder: str) -> None:
        """Record that a drop of the landing folder ``folder`` has started."""
        self.storage.put(self.DROP, encode_json({"requested_at": now_iso(), "folder": folder}))

    def has_drop_request(self) -> bool:
        return self.storage.exists(self.DROP)
