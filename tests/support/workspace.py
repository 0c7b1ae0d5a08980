"""Test helpers: write snapshots, run a table, replay and compare."""

from __future__ import annotations

import datetime as dt
import math
import os
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from diffcdc.config import TableConfig
from diffcdc.core.compare import compare
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.run import RunOptions, RunRequest, run_table
from diffcdc.sinks.openmirroring.contract import table_folder
from diffcdc.sinks.openmirroring.replay import replay
from diffcdc.spark.compat import to_arrow
from diffcdc.storage.local import LocalStore

UTC = dt.timezone.utc
#: Gate settings that accept any change volume: for tests about the diff, not the gate.
PERMISSIVE = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None, allow_empty=True)


class Workspace:
    """A source folder, a landing root and a state root under one temp dir."""

    def __init__(self, root: str, table: str = "T", keys: tuple[str, ...] = ("id",), **options: Any):
        self.root = root
        self.source = os.path.join(root, "source")
        self.landing = os.path.join(root, "landing")
        self.state = os.path.join(root, "state")
        os.makedirs(self.source, exist_ok=True)
        self.table = TableConfig(
            name=table, source=self.source, keys=list(keys), landing=self.landing, **options
        )

    @property
    def folder(self) -> str:
        return os.path.join(self.landing, table_folder(self.table.name, self.table.schema_name))

    def write(self, snapshot_id: str, rows: list[dict[str, Any]] | pa.Table, schema: pa.Schema | None = None) -> str:
        path = os.path.join(self.source, snapshot_id)
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        pq.write_table(table, path)
        return path

    def run(self, spark: Any, **kwargs: Any):
        """Run the table; ``reload``, ``reload_sinks`` and ``rollback_to`` are the run's
        request, the other keywords its :class:`RunOptions` (quality: PERMISSIVE)."""
        kwargs.setdefault("quality", PERMISSIVE)
        asked = {k: kwargs.pop(k) for k in ("reload", "reload_sinks", "rollback_to") if k in kwargs}
        source = kwargs.pop("source", None)
        options = RunOptions(**kwargs, request=RunRequest(**asked))
        return run_table(spark, self.table, self.state, options, source=source)

    def data_files(self) -> list[str]:
        if not os.path.isdir(self.folder):
            return []
        return sorted(n for n in os.listdir(self.folder) if n[0].isdigit())

    def landing_rows(self, name: str) -> list[dict[str, Any]]:
        return pq.read_table(os.path.join(self.folder, name)).to_pylist()

    def mirror(self, upto: int | None = None):
        return replay(LocalStore(self.landing), table_folder(self.table.name, self.table.schema_name), upto)

    def assert_mirror_equals(self, spark: Any, snapshot_id: str, upto: int | None = None, ignore=()) -> None:
        from diffcdc.sinks.openmirroring.rows import to_landing_columns
        from diffcdc.spark.paths import literal_path

        df = to_landing_columns(spark.read.parquet(literal_path(os.path.join(self.source, snapshot_id))))
        result = compare(self.mirror(upto).replayed(), to_arrow(df).to_pylist(), df.columns, ignore)
        assert result.identical, result.to_dict()

    def snapshot_state(self) -> dict[str, bytes]:
        """Every file under the state and landing roots with its content (to prove 'unchanged')."""
        out = {}
        for base in (self.state, self.landing):
            for folder, _, files in os.walk(base):
                for name in files:
                    if name in {".lock", "last_report.json"} or folder.endswith(("reports", "_logs")):
                        continue
                    path = os.path.join(folder, name)
                    with open(path, "rb") as handle:
                        out[os.path.relpath(path, self.root)] = handle.read()
        return out


def next_sequence(commit: Any, sink: str = "open_mirroring") -> int:
    """The next landing sequence number after a commit (of its Open Mirroring sink)."""
    return int(commit.record.sinks[sink].manifest["sequence"]["next"])


def norm(value: Any) -> Any:
    """Equality as the fingerprint defines it (NaN == NaN, -0.0 == 0.0, maps unordered)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and value == 0:
        return 0.0
    if isinstance(value, Decimal):
        return value.normalize(Context(prec=80))  # the default context rounds at 28 digits
    if isinstance(value, dict):
        return tuple(sorted((k, norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return ("map", tuple(sorted((k, norm(v)) for k, v in value)))
        return tuple(norm(v) for v in value)
    return value


def expected_counts(old: dict, new: dict) -> dict[str, int]:
    """Inserted/updated/deleted between two {key: row} dicts under fingerprint equality."""
    inserted = sum(1 for k in new if k not in old)
    deleted = sum(1 for k in old if k not in new)
    updated = sum(
        1
        for k in new
        if k in old and {c: norm(v) for c, v in new[k].items()} != {c: norm(v) for c, v in old[k].items()}
    )
    return {"inserted": inserted, "updated": updated, "deleted": deleted}
