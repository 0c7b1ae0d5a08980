"""``diffcdc verify``: replay each sink's published output and compare it with a snapshot."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pyspark.sql import SparkSession

from diffcdc.config import TableConfig
from diffcdc.core.classify import CHANGE, KEPT
from diffcdc.core.compare import VerifyResult, arrow_rows, compare, set_apart_kept
from diffcdc.core.normalize import NO_RULES, Normalizers, compared_value
from diffcdc.core.sql import quote
from diffcdc.engine.state_write import state_schema
from diffcdc.errors import InputRefused, UsageError
from diffcdc.sinks.base import Sink, SinkTable
from diffcdc.sinks.registry import build_sink
from diffcdc.sources.registry import read_snapshot_at
from diffcdc.spark.compat import to_arrow
from diffcdc.spark.paths import read_written
from diffcdc.state.root import StateRoot
from diffcdc.state.store import Commit, TableState


def verify_sinks(
    spark: SparkSession,
    sinks: dict[str, Sink],
    snapshot_path: str,
    *,
    ignore: Sequence[str] = (),
    infer_csv: bool = False,
    encoding: str = "utf-8",
    normalize: Normalizers = NO_RULES,
    kept: list[dict[str, object]] | None = None,
) -> dict[str, VerifyResult]:
    """Per sink id: its output replayed from nothing, compared with the snapshot's rows
    (the columns with ``normalize`` rules through them: a value the fingerprint took for
    unchanged is not published again).

    ``kept``: the keys a scoped table keeps outside its snapshot's scope (docs/scope.md): each
    must be in the sink (its values are no snapshot's to compare) and is set apart before the
    rest is compared with the snapshot."""
    if not os.path.exists(snapshot_path):
        raise InputRefused("snapshot not found", path=snapshot_path)
    snapshot = read_snapshot_at(spark, snapshot_path, infer_csv=infer_csv, encoding=encoding)
    fields = {f.name.lower(): f for f in snapshot.schema.fields}
    values = {f.name: compared_value(rules, f.dataType) for rules in normalize.columns
              if (f := fields.get(rules.column.lower())) is not None}
    results = {}
    for sink_id, sink in sinks.items():
        df = sink.comparable(snapshot)
        replayed = sink.replay(spark)
        if kept is None:
            results[sink_id] = compare(replayed, arrow_rows(to_arrow(df)), df.columns, ignore,
                                       values=values)
            continue
        within, absent = set_apart_kept(replayed, kept)
        result = compare(within, arrow_rows(to_arrow(df)), df.columns, ignore, values=values)
        result.kept = len(kept) - len(absent)
        if absent:
            result.identical = False
            result.missing = [*absent[:5], *result.missing][:5]
        results[sink_id] = result
    return results


def kept_keys(spark: SparkSession, state: TableState, head: Commit | None
              ) -> list[dict[str, object]] | None:
    """The keys the head version keeps outside its snapshot's scope (None: not a scoped
    version). Every version's own state folder holds all of them (a delta writes them too)."""
    if head is None or head.record.scope is None:
        return None
    record = head.record
    rows = read_written(spark, state.abspath(record.state_path), state_schema(record)).filter(
        f"{CHANGE} = {KEPT}").select(*[quote(k) for k in record.keys])
    return arrow_rows(to_arrow(rows))


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
    kept = kept_keys(spark, state, head)
    try:
        return verify_sinks(
            spark,
            sinks,
            snapshot_path,
            ignore=ignore,
            infer_csv=table.csv_infer_schema,
            encoding=table.csv_encoding,
            normalize=head.record.normalize if head is not None else table.normalizers,
            kept=kept,
        )
    finally:
        for sink in sinks.values():
            sink.close()
