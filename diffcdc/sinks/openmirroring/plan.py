"""What a change set looks like in the landing zone: columns, text schema, ``_metadata.json``.

Parquet files carry the snapshot's columns (an added column simply appears, a column removed
under ``removed_columns = "null"`` simply disappears); text files keep the declared
``SchemaDefinition`` (the spec allows no schema evolution for text), so a removed column is
written as NULL and an added one is a schema change (:func:`text_schema_problem`). The
``_metadata.json`` of a published table can never change (:func:`landing_plan` refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from diffcdc.core.changeset import OP
from diffcdc.core.sql import quote
from diffcdc.errors import ConfigError
from diffcdc.sinks.openmirroring.config import OpenMirroringSinkConfig
from diffcdc.sinks.openmirroring.metadata import metadata_document
from diffcdc.sinks.openmirroring.rows import to_landing_columns
from diffcdc.sinks.openmirroring.text import TextFormat, schema_definition


@dataclass
class LandingPlan:
    """The landing side of one version's batch."""

    frame: DataFrame  #: the change set in landing columns and order, plus OP
    columns: list[str]
    metadata: dict[str, Any]
    text: TextFormat | None
    landing_schema: dict[str, Any] | None  #: text only: the declared schema (Spark JSON)


def text_format(config: OpenMirroringSinkConfig) -> TextFormat | None:
    if not config.is_text:
        return None
    t = config.text
    return TextFormat(
        extension=config.extension,
        row_separator=t.row_separator,
        column_separator=config.column_separator,
        quote=t.quote_character,
        escape=t.escape_character,
        null_value=t.null_value,
        encoding=t.encoding,
    )


def reload_hint(table: str, schema_name: str | None, what: str = "re-create the table") -> str:
    schema = f" --schema {schema_name}" if schema_name else ""
    return f"{what} on purpose with 'diffcdc reload --table {table}{schema} --yes'"


def landing_plan(
    config: OpenMirroringSinkConfig,
    changes: DataFrame,
    keys: list[str],
    previous: dict[str, Any] | None,
    *,
    table: str,
    schema_name: str | None,
    snapshot: str,
) -> LandingPlan:
    """Project a neutral change set to landing columns; refuse a changed ``_metadata.json``.

    ``previous`` is this sink's manifest of the version before (None when the table starts
    from nothing here: first load, re-creation, or a sink added later).
    """
    landing_df = to_landing_columns(changes)  # OP is an int: it passes through
    text = text_format(config)
    landing_schema = None
    if text is not None:
        old = previous.get("landing_schema") if previous else None
        target = T.StructType.fromJson(old) if old else landing_df.drop(OP).schema
        by_lower = {c.lower(): c for c in landing_df.columns}
        landing_df = landing_df.select(
            *[
                F.col(quote(by_lower[f.name.lower()])).cast(f.dataType).alias(f.name)
                if f.name.lower() in by_lower
                else F.lit(None).cast(f.dataType).alias(f.name)
                for f in target.fields
            ],
            F.col(OP),
        )
        landing_schema = target.jsonValue()
        columns = target.fieldNames()
    else:
        columns = [c for c in landing_df.columns if c != OP]
    document = metadata_document(
        keys,
        upsert_default=config.upsert_default,
        last_update_time=config.file_detection == "last_update_time",
        text=text,
        schema=schema_definition(T.StructType.fromJson(landing_schema), keys)
        if landing_schema
        else None,
    )
    if previous is not None:
        published = previous.get("metadata_document") or {"keyColumns": keys}
        changed = sorted(k for k in {*published, *document} if published.get(k) != document.get(k))
        if changed:
            raise ConfigError(
                f"landing settings changed since the table was published ({', '.join(changed)}: "
                f"{ {k: published.get(k) for k in changed} } → { {k: document.get(k) for k in changed} }); "
                "_metadata.json cannot change under a published table",
                table=table,
                snapshot=snapshot,
                hint="restore the table settings, or " + reload_hint(table, schema_name),
            )
    return LandingPlan(landing_df, columns, document, text, landing_schema)


def text_schema_problem(
    config: OpenMirroringSinkConfig, schema: T.StructType, previous: dict[str, Any] | None
) -> str | None:
    """Text files keep their SchemaDefinition: an added or retyped landing column breaks it."""
    declared = previous.get("landing_schema") if previous else None
    if not config.is_text or not declared:
        return None
    landing = T.StructType(
        [
            T.StructField(f.name, T.StringType())
            if isinstance(f.dataType, (T.MapType, T.StructType, T.ArrayType))
            else f
            for f in schema.fields
        ]
    )
    old = {f.name.lower(): f for f in T.StructType.fromJson(declared).fields}
    parts = []
    added = [f.name for f in landing.fields if f.name.lower() not in old]
    if added:
        parts.append(f"added {added} (delimited text allows no schema evolution)")
    retyped = [
        f"{f.name} {old[f.name.lower()].dataType.simpleString()}→{f.dataType.simpleString()}"
        for f in landing.fields
        if f.name.lower() in old
        and not isinstance(f.dataType, T.NullType)
        and f.dataType.simpleString() != old[f.name.lower()].dataType.simpleString()
    ]
    if retyped:
        parts.append("retyped " + ", ".join(retyped))
    return "; ".join(parts) or None
