"""What one snapshot publishes, decided before anything is computed: the landing contract.

Given the snapshot, the table settings and the head commit, :func:`plan_landing` decides

* whether the table continues or is re-created (a requested reload, or a schema change under
  ``schema_policy = "recreate"``), refusing what cannot continue (changed keys, fingerprint or
  landing settings; a schema change under ``schema_policy = "fail"``);
* the landing columns: Parquet files carry the snapshot's columns (an added column simply
  appears, a column removed under ``removed_columns = "null"`` simply disappears); text files
  keep the declared ``SchemaDefinition`` (the spec allows no schema evolution for text), so a
  removed column is written as NULL and an added one is a schema change;
* the ``_metadata.json`` document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from diffcdc.config import TableConfig
from diffcdc.core.fingerprint import FINGERPRINT_VERSION, quote
from diffcdc.core.schema import diff_schema
from diffcdc.errors import ConfigError, KeyViolation, SchemaChangeError, StateError
from diffcdc.sinks.openmirroring.contract import metadata_document, to_landing_columns
from diffcdc.sinks.openmirroring.text import TextFormat, schema_definition
from diffcdc.state.store import Commit


@dataclass
class LandingPlan:
    """The landing side of one snapshot's batch."""

    df: DataFrame  #: the snapshot in landing columns and order
    columns: list[str]
    metadata: dict[str, Any]
    text: TextFormat | None
    landing_schema: dict[str, Any] | None  #: text only: the declared schema (Spark JSON)
    recreate: dict[str, Any] | None  #: {"reason", "request"} when the table is re-created


def text_format(table: TableConfig) -> TextFormat | None:
    if not table.is_text:
        return None
    t = table.text
    return TextFormat(
        extension=table.extension,
        row_separator=t.row_separator,
        column_separator=table.column_separator,
        quote=t.quote_character,
        escape=t.escape_character,
        null_value=t.null_value,
        encoding=t.encoding,
    )


def reload_hint(table: TableConfig, what: str = "re-create the table") -> str:
    schema = f" --schema {table.schema_name}" if table.schema_name else ""
    return f"{what} on purpose with 'diffcdc reload --table {table.name}{schema} --yes'"


def plan_landing(
    table: TableConfig,
    snapshot: DataFrame,
    keys: list[str],
    head: Commit | None,
    sid: str,
    reload_request: dict[str, Any] | None = None,
) -> LandingPlan:
    """Decide how this snapshot lands (see the module docstring); raises when it cannot."""
    landing_df = to_landing_columns(snapshot)
    text = text_format(table)
    recreate = None
    if reload_request is not None:
        recreate = {"reason": reload_request.get("reason", "reload"), "request": reload_request["id"]}
    elif head is not None:
        _check_identity(head, keys, table, sid)
        problem = _schema_problem(head, snapshot.schema, landing_df.schema, table)
        if problem:
            if table.schema_policy != "recreate":
                raise SchemaChangeError(
                    f"schema changed: {problem}",
                    table=table.name,
                    snapshot=sid,
                    hint="restore the columns in the extract, set schema_policy = \"recreate\" "
                    "for the table, or " + reload_hint(table),
                )
            recreate = {"reason": f"schema changed: {problem}", "request": None}

    landing_schema = None
    if text is not None:
        old = head.record.get("landing_schema") if head is not None and recreate is None else None
        target = T.StructType.fromJson(old) if old else landing_df.schema
        by_lower = {c.lower(): c for c in landing_df.columns}
        landing_df = landing_df.select(
            *[
                F.col(quote(by_lower[f.name.lower()])).cast(f.dataType).alias(f.name)
                if f.name.lower() in by_lower
                else F.lit(None).cast(f.dataType).alias(f.name)
                for f in target.fields
            ]
        )
        landing_schema = target.jsonValue()
        columns = target.fieldNames()
    else:
        columns = landing_df.columns
    document = metadata_document(
        keys,
        upsert_default=table.upsert_default,
        last_update_time=table.file_detection == "last_update_time",
        text=text,
        schema=schema_definition(T.StructType.fromJson(landing_schema), keys)
        if landing_schema
        else None,
    )
    if head is not None and recreate is None:
        published = head.record.get("metadata_document") or {"keyColumns": head.record["keys"]}
        changed = sorted(k for k in {*published, *document} if published.get(k) != document.get(k))
        if changed:
            raise ConfigError(
                f"landing settings changed since the table was published ({', '.join(changed)}: "
                f"{ {k: published.get(k) for k in changed} } → { {k: document.get(k) for k in changed} }); "
                "_metadata.json cannot change under a published table",
                table=table.name,
                snapshot=sid,
                hint="restore the table settings, or " + reload_hint(table),
            )
    return LandingPlan(landing_df, columns, document, text, landing_schema, recreate)


def _check_identity(head: Commit, keys: list[str], table: TableConfig, sid: str) -> None:
    record = head.record
    if [k.lower() for k in record["keys"]] != [k.lower() for k in keys]:
        raise KeyViolation(
            f"key columns changed from {record['keys']} to {keys}; keyColumns can never change "
            "once published",
            table=table.name,
            snapshot=sid,
            hint="restore the key setting, or " + reload_hint(table, "re-create the table with the new keys"),
        )
    fp = record["fingerprint"]
    if fp != {"version": FINGERPRINT_VERSION, "bits": table.fingerprint_bits}:
        raise StateError(
            f"state was fingerprinted with {fp}, this run uses version {FINGERPRINT_VERSION} "
            f"with {table.fingerprint_bits} bits; mixing them would report every row as changed",
            table=table.name,
            snapshot=sid,
            hint="keep the old fingerprint_bits, or " + reload_hint(table, "re-create the table to rebuild its state"),
        )


def _schema_problem(
    head: Commit, schema: T.StructType, landing: T.StructType, table: TableConfig
) -> str | None:
    """A description of what the schema policy must handle, or None when the run continues."""
    diff = diff_schema(T.StructType.fromJson(head.record["schema"]), schema)
    parts = []
    removed = [] if table.removed_columns == "null" else diff.removed
    if removed:
        parts.append(f"removed {removed}")
    if diff.retyped:
        parts.append("retyped " + ", ".join(f"{n} {a}→{b}" for n, a, b in diff.retyped))
    declared = head.record.get("landing_schema")
    if table.is_text and declared:
        # Text files keep their SchemaDefinition: compare the landing types with it.
        old = {f.name.lower(): f for f in T.StructType.fromJson(declared).fields}
        added = [f.name for f in landing.fields if f.name.lower() not in old]
        if added:
            parts.append(f"added {added} (delimited text allows no schema evolution)")
        retyped = [
            f"{f.name} {old[f.name.lower()].dataType.simpleString()}→{f.dataType.simpleString()}"
            for f in landing.fields
            if f.name.lower() in old
            and not isinstance(f.dataType, T.NullType)
            and f.dataType.simpleString() != old[f.name.lower()].dataType.simpleString()
            and f.name not in {n for n, _, _ in diff.retyped}
        ]
        if retyped:
            parts.append("retyped " + ", ".join(retyped))
    return "; ".join(parts) or None
