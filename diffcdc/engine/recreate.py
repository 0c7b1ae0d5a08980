"""Whether a snapshot continues the table or re-creates it, decided before anything is computed.

The table continues unless a reload was requested, or its schema changed in a way the table's
``schema_policy`` handles by re-creating it. Changed keys or a changed fingerprint can never
continue (they would report every row as changed, and keyColumns can never change once
published); a schema change under ``schema_policy = "fail"`` is refused. Sinks add their own
schema limits (delimited text allows no added column) through ``Sink.schema_problem``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import types as T

from diffcdc.config import TableConfig
from diffcdc.core.fingerprint import FINGERPRINT_VERSION
from diffcdc.core.normalize import ColumnRules, Normalizers
from diffcdc.core.schema import diff_schema
from diffcdc.errors import ConfigError, KeyViolation, SchemaChangeError, StateError
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


@dataclass(frozen=True)
class HashRule:
    """What the fingerprint leaves out and how it normalizes: its identity beside its version
    and width (a commit record holds it as ``exclude`` and ``normalize``)."""

    exclude: tuple[str, ...]
    normalize: Normalizers

    def describe(self) -> str:
        return (f"exclude {', '.join(self.exclude) or 'none'}; "
                f"normalize {self.normalize.describe()}")


@dataclass(frozen=True)
class Refingerprint:
    """A version whose snapshot is compared under the head's rule (``compared``) and whose
    state stores the fingerprints of the table's rule now (``stored``): a controlled
    re-fingerprint, no row counted as changed because the rule changed."""

    compared: HashRule
    stored: HashRule

    def describe(self) -> str:
        return f"fingerprint rule changed from ({self.compared.describe()}) to " \
               f"({self.stored.describe()})"


def check_normalizers(table: TableConfig, schema: T.StructType, sid: str) -> Normalizers:
    """The table's normalizers spelled as ``schema`` spells their columns; refuses (exit 2)
    a column the snapshot does not have or a rule that does not fit its type."""
    normalize = table.normalizers
    fields = {f.name.lower(): f for f in schema.fields}
    for rules in normalize.columns:
        found = fields.get(rules.column.lower())
        if found is None:
            raise ConfigError(
                f"normalize names column {rules.column!r}, which the snapshot does not have "
                f"(its columns: {', '.join(schema.names)})",
                table=table.name, snapshot=sid,
                hint="correct the column's name in the table's normalize setting, or remove it "
                "there")
        problem = rules.fits(found.dataType)
        if problem is not None:
            raise ConfigError(
                f"normalizer {problem}", table=table.name, snapshot=sid,
                hint="use string rules (trim, rtrim, casefold, empty_as_null, json) on string "
                "columns and round:N on float, double or decimal columns, in the table's "
                "normalize setting")
    return normalize.only(schema.names)


def refingerprint(
    head: CommitRecord, schema: T.StructType, rule: HashRule
) -> Refingerprint | None:
    """The re-fingerprint this version makes when the head's rule differs from ``rule`` (the
    table's now) on a column of ``schema``, or None. A column the head's snapshot did not
    have takes ``rule`` on both sides: the head's state holds nothing of it to compare."""
    had = {f["name"].lower() for f in head.schema.get("fields", [])}
    names = {n.lower(): n for n in schema.names}
    old_exclude = [names[c.lower()] for c in head.exclude
                   if c.lower() in names and c.lower() in had]
    old_exclude += [c for c in rule.exclude if c.lower() not in had]
    old_rules: list[ColumnRules] = [
        ColumnRules(names[c.column.lower()], c.rules) for c in head.normalize.columns
        if c.column.lower() in names and c.column.lower() in had]
    old_rules += [c for c in rule.normalize.columns if c.column.lower() not in had]
    compared = HashRule(tuple(old_exclude), Normalizers(tuple(
        sorted(old_rules, key=lambda c: c.column.lower()))))
    same_exclude = {c.lower() for c in compared.exclude} == {
        c.lower() for c in rule.exclude if c.lower() in names}
    if same_exclude and compared.normalize.same_as(rule.normalize.only(schema.names)):
        return None
    return Refingerprint(compared, rule)
