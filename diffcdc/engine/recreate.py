"""Whether a snapshot continues the table or re-creates it, decided before anything is computed.

The table continues unless a reload was requested, or its schema changed in a way the table's
``schema_policy`` handles by re-creating it. Changed keys or a changed fingerprint can never
continue (they would report every row as changed, and keyColumns can never change once
published); a schema change under ``schema_policy = "fail"`` is refused. Sinks add their own
schema limits (delimited text allows no added column) through ``Sink.schema_problem``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import types as T

from diffcdc.config import TableConfig
from diffcdc.core.fingerprint import FINGERPRINT_VERSION
from diffcdc.core.schema import diff_schema
from diffcdc.errors import KeyViolation, SchemaChangeError, StateError
from diffcdc.state.commit import CommitRecord, Recreate
from diffcdc.state.requests import ReloadRequest


def reload_hint(table: TableConfig, what: str = "re-create the table") -> str:
    schema = f" --schema {table.schema_name}" if table.schema_name else ""
    return f"{what} on purpose with 'diffcdc reload --table {table.name}{schema} --yes'"


def decide_recreate(
    table: TableConfig,
    schema: T.StructType,
    keys: list[str],
    head: CommitRecord | None,
    sid: str,
    reload: ReloadRequest | None,
    sink_problems: Sequence[str] = (),
    *,
    identity_checked: bool = False,
) -> Recreate | None:
    """The re-creation this snapshot makes, or None when the table continues; raises.
    ``reload``: a pending reload of the whole table (one of named sinks re-creates nothing);
    ``identity_checked``: the run's plan already checked the keys and the fingerprint against
    ``head`` (:func:`check_identity`), which is not done again."""
    if reload is not None:
        return Recreate(reload.reason, reload.id)
    if head is None:
        return None
    if not identity_checked:
        check_identity(head, keys, table, sid)
    problem = schema_problem(head, schema, table, sink_problems)
    if problem is None:
        return None
    if table.schema_policy != "recreate":
        raise SchemaChangeError(
            f"schema changed: {problem}",
            table=table.name,
            snapshot=sid,
            hint="restore the columns (as they were spelled) in the extract, set "
            "schema_policy = \"recreate\" "
            "for the table, or " + reload_hint(table),
        )
    return Recreate(f"schema changed: {problem}", None)


def check_identity(head: CommitRecord, keys: list[str], table: TableConfig, sid: str) -> None:
    """Refuse changed key columns or a changed fingerprint against the committed head."""
    if [k.lower() for k in head.keys] != [k.lower() for k in keys]:
        raise KeyViolation(
            f"key columns changed from {head.keys} to {keys}; keyColumns can never change "
            "once published",
            table=table.name,
            snapshot=sid,
            hint="restore the key setting, or "
            + reload_hint(table, "re-create the table with the new keys"),
        )
    fp = head.fingerprint
    if (fp.version, fp.bits) != (FINGERPRINT_VERSION, table.fingerprint_bits):
        raise StateError(
            f"state was fingerprinted with {{'version': {fp.version}, 'bits': {fp.bits}}}, this "
            f"run uses version {FINGERPRINT_VERSION} with {table.fingerprint_bits} bits; mixing "
            "them would report every row as changed",
            table=table.name,
            snapshot=sid,
            hint="keep the old fingerprint_bits, or "
            + reload_hint(table, "re-create the table to rebuild its state"),
        )


def schema_problem(
    head: CommitRecord, schema: T.StructType, table: TableConfig, sink_problems: Sequence[str]
) -> str | None:
    """What the schema policy must handle (removed, renamed-in-case or retyped columns, sinks'
    limits), or None."""
    diff = diff_schema(T.StructType.fromJson(head.schema), schema)
    parts = diff.describe(removed=table.removed_columns != "null")
    for problem in sink_problems:
        if problem not in parts:
            parts.append(problem)
    return "; ".join(parts) or None
