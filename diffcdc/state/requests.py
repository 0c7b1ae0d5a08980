"""A table's pending operator requests: re-creating and dropping the table.

Under the table's folder: ``reload.json`` (the next commit must re-create the table, or with
``sinks`` give just those sinks a full image; kept until a commit has carried it out) and ``drop.json`` (a drop of the landing folder has started; runs
refuse the table until ``diffcdc drop`` finishes it).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from diffcdc.errors import StateError
from diffcdc.state.records import Commit, encode_json, now_iso
from diffcdc.storage.base import ByteStore


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

    def request_reload(self, reason: str, sinks: Sequence[str] = ()) -> dict[str, Any]:
        """Record that the next commit must re-create the table, or with ``sinks`` start just
        those sinks afresh from a full image (kept until a commit carries it out).

        A pending request is widened, never narrowed: a reload of the table stays one, and
        sinks asked for are added to a pending reload of other sinks.
        """
        existing = self.reload_request()
        if existing is not None:
            pending = existing.get("sinks") or []
            if not pending or not sinks or set(sinks) <= set(pending):
                if pending and not sinks:  # the whole table now: widen to it
                    existing = {**existing, "sinks": []}
                    self.storage.put(self.RELOAD, encode_json(existing))
                return existing
            sinks = sorted(set(pending) | set(sinks))
        request: dict[str, Any] = {"id": uuid.uuid4().hex, "requested_at": now_iso(),
                                   "reason": reason}
        if sinks:
            request["sinks"] = sorted(sinks)
        self.storage.put(self.RELOAD, encode_json(request))
        return request

    def reload_request(self) -> dict[str, Any] | None:
        """The pending reload request, or None (also once a commit has carried it out: the
        file a crash right after that commit left behind is removed)."""
        request = self._read_reload()
        if request is not None and self._carried_out(request):
            self.storage.delete(self.RELOAD)
            return None
        return request

    def pending_reload(self) -> dict[str, Any] | None:
        """:meth:`reload_request`, read only (plan and status take no lock, write nothing)."""
        request = self._read_reload()
        return None if request is None or self._carried_out(request) else request

    def _read_reload(self) -> dict[str, Any] | None:
        """``reload.json``, or None; a damaged one is a :class:`StateError` (one line)."""
        try:
            request = self.storage.read_json(self.RELOAD)
        except ValueError as exc:
            problem = f"is not valid JSON ({exc})"
        else:
            if request is None:
                return None
            if isinstance(request, dict) and isinstance(request.get("id"), str):
                return dict(request)
            problem = "is not a reload request (a JSON object with an id)"
        raise StateError(
            f"the table's reload request {problem}",
            path=self.reload_path,
            hint="delete that file, then ask for the re-creation again with 'diffcdc reload' "
            "if the table is to be re-created",
        )

    def _carried_out(self, request: dict[str, Any]) -> bool:
        """Whether a commit has re-created the table (or its named sinks) for this request."""
        ident = request.get("id")
        return any(
            (c.record.recreate is not None and c.record.recreate.request == ident)
            or any(e.manifest.get("reload") == ident for e in c.record.sinks.values())
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
