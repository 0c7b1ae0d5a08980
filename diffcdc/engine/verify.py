"""``diffcdc verify``: replay each sink's published output and compare it with a snapshot."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pyspark.sql import SparkSession

from diffcdc.config import TableConfig
from diffcdc.core.compare import VerifyResult, arrow_rows, compare
from diffcdc.core.normalize import NO_RULES, Normalizers, compared_value
from diffcdc.errors import InputRefused, UsageError
from diffcdc.sinks.base import Sink, SinkTable
from diffcdc.sinks.registry import build_sink
from diffcdc.sources.registry import read_snapshot_at
from diffcdc.spark.compat import to_arrow
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState


def verify_sinks(
    spark: SparkSession,
    sinks: dict[str, Sink],
    snapshot_path: str,
    *,
    ignore: Sequence[str] = (),
    infer_csv: bool = False,
    encoding: str = "utf-8",
    normalize: Normalizers = NO_RULES,
) -> dict[str, VerifyResult]:
    """Per sink id: its output replayed from nothing, compared with the snapshot's rows
    (the columns with ``normalize`` rules through them: a value the fingerprint took for
    unchanged is not published again)."""
    if not os.path.exists(snapshot_path):
        raise InputRefused("snapshot not found", path=snapshot_path)
    snapshot = read_snapshot_at(spark, snapshot_path, infer_csv=infer_csv, encoding=encoding)
    fields = {f.name.lower(): f for f in snapshot.schema.fields}
    values = {f.name: compared_value(rules, f.dataType) for rules in normalize.columns
              if (f := fields.get(rules.column.lower())) is not None}
    results = {}
    for sink_id, sink in sinks.items():
        df = sink.comparable(snapshot)
        results[sink_id] = compare(sink.replay(spark), arrow_rows(to_arrow(df)), df.columns, ignore,
                                   values=values)
    return results


def verify_table(
    spark: SparkSession,
    table: TableConfig,
    state_root: StateRoot | str,
    snapshot_path: str,
    *,
    ignore: Sequence[str] = (),
    only: str | None = None,
) -> dict[str, VerifyResult]:
    """:func:`verify_sinks` over a configured table's sinks (``only``: one sink id)."""
    state = TableState(state_root, table.state_name)
    head = state.head()
    # The keys of the current incarnation, as the snapshot spells them (a reload may have
    # changed them; the config may spell them in another case).
    keys = tuple(head.record.keys) if head is not None else tuple(table.keys)
    ident = SinkTable(table.name, keys, table.schema_name, tuple(table.exclude))
    chosen = [s for s in table.sinks if only is None or s.sink_id == only]
    if not chosen:
        raise UsageError(
            f"--sink {only} is not a sink of table {table.name}",
            hint=f"its sinks: {', '.join(s.sink_id for s in table.sinks)}",
        )
    sinks = {cfg.sink_id: build_sink(cfg, ident, state) for cfg in chosen}
    try:
        return verify_sinks(
            spark,
            sinks,
            snapshot_path,
            ignore=ignore,
            infer_csv=table.csv_infer_schema,
            encoding=table.csv_encoding,
            normalize=head.record.normalize if head is not None else table.normalizers,
        )
    finally:
        for sink in sinks.values():
            sink.close()
