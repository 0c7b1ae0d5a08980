"""The Delta history sink's publishing driven without Spark: each snapshot's change set is
computed here in Python (as the engine's diff would give it), staged as the Parquet the sink
reads, and handed to :meth:`DeltaSink.publish` with the manifest :meth:`DeltaSink.stage`
writes. Fast enough for a property over many random sequences; the engine's own path is
covered by the Spark tests."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from diffcdc.core.changeset import OP, OP_DELETE, OP_INSERT, OP_UPDATE
from diffcdc.core.compare import norm_value
from diffcdc.sinks.base import SinkHistory, SinkTable
from diffcdc.sinks.delta.config import DeltaSinkConfig
from diffcdc.sinks.delta.sink import DeltaSink
from diffcdc.sources.snapshot_time import format_time

UTC = dt.timezone.utc
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("n", pa.int64())])


@dataclass
class HistoryDriver:
    """One history sink at ``root/history``, fed snapshots of ``{id: (v, n)}``."""

    root: str
    settings: dict[str, Any] = field(default_factory=dict)
    manifests: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    previous: dict[int, tuple[Any, Any]] | None = None
    version: int = 0

    @property
    def path(self) -> str:
        return os.path.join(self.root, "history")

    def sink(self) -> DeltaSink:
        config = DeltaSinkConfig(**{"type": "delta", "name": "history", "path": self.path,
                                    "mode": "scd2", **self.settings})
        return DeltaSink("history", SinkTable("T", ("id",)), config)

    def time(self, version: int) -> dt.datetime:
        return dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(days=version)

    def publish(self, snapshot: dict[int, tuple[Any, Any]], *, image: bool = False) -> None:
        """The next version: ``snapshot``'s change set (a full image: every row) published."""
        self.version += 1
        initial = image or self.previous is None
        rows = []
        if initial:
            rows = [self._row(k, v, OP_INSERT) for k, v in snapshot.items()]
        else:
            assert self.previous is not None
            for k, v in snapshot.items():
                old = self.previous.get(k)
                if old is None:
                    rows.append(self._row(k, v, OP_INSERT))
                elif [norm_value(x) for x in old] != [norm_value(x) for x in v]:
                    rows.append(self._row(k, v, OP_UPDATE))
            rows += [self._row(k, (None, None), OP_DELETE) for k in self.previous
                     if k not in snapshot]
        staging = os.path.join(self.root, "staging", str(self.version))
        os.makedirs(os.path.join(staging, "changes"))
        schema = SCHEMA.append(pa.field(OP, pa.int32()))
        pq.write_table(pa.Table.from_pylist(rows, schema),
                       os.path.join(staging, "changes", "part-0.parquet"))
        sink = self.sink()
        manifest = {"target": self.path, "changelog": None, "recreate": image,
                    "keys": ["id"], "incarnation": "i1", "table_id": None, "rows": len(rows),
                    "initial": initial, "mode": "scd2",
                    "valid_from": format_time(self.time(self.version)),
                    "track": sink.config.track_history_columns,
                    "track_except": sink.config.track_history_except_columns or [],
                    "layout": sink.layout.record()}
        self.manifests.append((self.version, manifest))
        sink.publish(self.version, manifest, staging, SinkHistory(tuple(self.manifests)))
        self.previous = dict(snapshot)

    @staticmethod
    def _row(k: int, v: tuple[Any, Any], op: int) -> dict[str, Any]:
        return {"id": k, "v": v[0], "n": v[1], OP: op}


def snapshot_rows(snapshot: dict[int, tuple[Any, Any]]) -> list[dict[str, Any]]:
    """A snapshot as the history's rows without their metadata columns."""
    return [{"id": k, "v": v[0], "n": v[1]} for k, v in snapshot.items()]
