"""A config checked against the installed extras (:mod:`diffcdc.extras`) when it is loaded.

Before Spark starts: a sink, a state root or landing zone on ADLS Gen2 / OneLake, or gate
expectations whose library is missing refuse the config in one line naming the extra (exit 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from diffcdc.extras import ADLS, GX, LINEAGE, METRICS, Extra, require
from diffcdc.sinks.registry import sink_plugin
from diffcdc.storage.registry import ADLS_SCHEMES, scheme

if TYPE_CHECKING:
    from diffcdc.config import RunConfig, TableConfig
    from diffcdc.core.quality_config import QualityConfig


def _is_adls(location: object) -> bool:
    return isinstance(location, str) and scheme(location) in ADLS_SCHEMES


def table_needs(table: TableConfig, quality: QualityConfig) -> Iterator[tuple[str, Extra]]:
    """What in ``table`` (gated by ``quality``: the global settings merged with the table's)
    needs an extra, as (what, extra) pairs: ``("sink delta", DELTA)``."""
    for sink in table.sinks:
        plugin = sink_plugin(sink.type)
        if plugin is None:
            continue
        if plugin.extra is not None:
            yield f"sink {sink.sink_id}", plugin.extra
        if plugin.capabilities.byte_store:
            for field in plugin.path_fields:
                if _is_adls(getattr(sink, field, None)):
                    yield f"sink {sink.sink_id} {field}", ADLS
    if quality.expectations or quality.expectation_suite or quality.data_docs_dir:
        yield "quality", GX


def check_table(table: TableConfig, quality: QualityConfig, path: str | None = None) -> None:
    """Refuse ``table`` when something it uses needs an extra that is not installed."""
    for where, extra in table_needs(table, quality):
        require(extra, table=table.name, where=where, path=path)


def check_state(locations: Iterable[object], path: str | None = None) -> None:
    """Refuse a state root (or data folder) on ADLS when the Azure SDK is not installed."""
    if any(_is_adls(location) for location in locations):
        require(ADLS, where="state", path=path)


def check_config(config: RunConfig) -> None:
    """Refuse ``config`` when a table, its gate or the state needs an extra not installed."""
    check_state((config.state, config.state_data), config.source_file)
    if config.lineage is not None:
        require(LINEAGE, where="[lineage]", path=config.source_file)
    if config.metrics is not None:
        require(METRICS, where="[metrics]", path=config.source_file)
    for table in config.tables:
        check_table(table, config.quality.merged(table.quality), config.source_file)
