"""Python entry points: run a table from a Spark DataFrame (a notebook, a job).

::

    import diffcdc
    report = diffcdc.run_dataframe(
        spark.table("erp.orders"), table="Orders", keys=["OrderID"],
        sinks=[{"type": "open_mirroring", "landing": "/lake/landing"}], state="/lake/state",
    )

The DataFrame is one full snapshot. It goes through the same validation, quality gate,
exactly-once commit and error types as ``diffcdc run``; it is read once into a Parquet copy
under the table's state (``keep_snapshots`` keeps the last N copies for ``diffcdc verify``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from diffcdc.config import TableConfig, sinks_apart_from_state
from diffcdc.core.quality_config import QualityConfig
from diffcdc.engine.report import Progress, TableReport
from diffcdc.errors import ConfigError, UsageError


def run_dataframe(
    df: Any,
    *,
    table: str,
    keys: Sequence[str],
    sinks: Sequence[Mapping[str, Any]] | None = None,
    landing: str | None = None,
    state: str = "state",
    state_data: str | None = None,
    state_options: Mapping[str, Any] | None = None,
    snapshot_id: str | None = None,
    snapshot_time: dt.datetime | None = None,
    exclude: Sequence[str] = (),
    quality: Mapping[str, Any] | QualityConfig | None = None,
    keep_snapshots: int = 0,
    keep_versions: int = 10,
    override_checks: Sequence[str] = (),
    progress: Progress | None = None,
    **table_options: Any,
) -> TableReport:
    """Diff ``df`` (one full snapshot of ``table``) against the table's state and publish it.

    ``sinks`` are the entries of ``[[tables.NAME.sinks]]`` as dicts (``type`` first);
    ``landing`` alone is the one ``open_mirroring`` sink of a table without ``sinks``.
    ``snapshot_id`` orders snapshots lexically (default: now in UTC, ``20261123T073500.123456Z``);
    an id already committed does nothing, an older one is refused. ``snapshot_time`` is the
    moment the source showed these rows (a history sink's validity; without a zone: UTC;
    default: now). ``quality`` holds the gate settings (``[quality]``); ``table_options`` any
    other table field (``schema_name``, ``codec``, ``schema_policy`` ...). ``state`` may be an
    ``abfss://``/``https://`` URL, with ``state_data`` and ``state_options`` as in
    ``[diffcdc]`` (docs/state.md). Returns the run
    report; raises a :class:`diffcdc.errors.DiffcdcError` (with ``exit_code``) when the run
    fails, with state and every sink unchanged.
    """
    from diffcdc.spark.version import require_pyspark

    require_pyspark()  # before anything that imports it: one line, not an ImportError
    from pyspark.sql import DataFrame

    from diffcdc.engine.run import RunOptions, run_table
    from diffcdc.sources.dataframe import DataFrameSource
    from diffcdc.spark.session import is_connect
    from diffcdc.spark.settings import borrowed_session
    from diffcdc.spark.version import require_server
    from diffcdc.state.root import StateRoot

    if not isinstance(df, DataFrame):
        raise UsageError(f"run_dataframe needs a pyspark DataFrame, not {_kind(df)}", table=table,
                         hint=_convert_hint(df))
    fields: dict[str, Any] = {
        **table_options,
        "name": table,
        "source": {"type": "dataframe"},
        "keys": list(keys),
        "exclude": list(exclude),
        "keep_snapshots": keep_snapshots,
    }
    if sinks is not None:
        fields["sinks"] = [dict(s) for s in sinks]
    if landing is not None:
        fields["landing"] = landing
    if sinks is None and landing is None:
        raise UsageError("run_dataframe needs sinks=[...] or landing=...", table=table)
    try:
        config = TableConfig(**fields)
        gate = quality if isinstance(quality, QualityConfig) else QualityConfig(**(quality or {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise ConfigError(f"{where}: {first['msg']}", table=table,
                          hint="fix the arguments of run_dataframe") from None
    from diffcdc.extras_check import check_state, check_table

    check_table(config, QualityConfig().merged(gate))  # a sink's or the gate's library missing
    check_state((state, state_data))
    overlap = sinks_apart_from_state(config.targets(), state, state_data)
    if overlap:
        raise ConfigError(overlap, table=table, hint="fix the arguments of run_dataframe")
    root = StateRoot(state, state_data, state_options, table=table)
    try:
        options = RunOptions(keep_versions=keep_versions, quality=gate,
                             overrides=frozenset(override_checks), progress=progress)
        if is_connect(df.sparkSession):  # a Connect session's server must be Spark 4
            require_server(df.sparkSession.version, "of this session")
        with borrowed_session(df.sparkSession) as caller:
            source = DataFrameSource(df, config.name, snapshot_id, zone=caller.time_zone,
                                     time=snapshot_time)
            return run_table(df.sparkSession, config, root, options, source=source)
    finally:
        root.close()  # a URL root's HTTP client: a notebook calls this again and again


def _kind(value: Any) -> str:
    """``a pandas DataFrame``, ``a pyarrow Table``, ... (what a wrong input is, for messages)."""
    cls = type(value)
    if cls.__module__.startswith("pyspark.pandas"):
        return f"a pandas-on-Spark {cls.__name__}"
    package = cls.__module__.split(".", 1)[0]
    if package in ("builtins", "pyspark", "diffcdc") or not package:
        return f"{'an' if cls.__name__[:1].lower() in 'aeiou' else 'a'} {cls.__name__}"
    return f"a {package} {cls.__name__}"


def _convert_hint(value: Any) -> str:
    """How to turn ``value`` into a Spark DataFrame."""
    module = type(value).__module__
    if module.startswith("pyspark.pandas"):
        return "pass psdf.to_spark()"
    package = module.split(".", 1)[0]
    if package in ("pandas", "pyarrow"):
        return "convert it with spark.createDataFrame(...), or write it to Parquet and use a folder source"
    if package == "polars":
        return ("convert it with spark.createDataFrame(df.to_arrow()), or write it to Parquet "
                "and use a folder source")
    return "build a Spark DataFrame (spark.table(...), spark.read..., spark.createDataFrame(...))"
