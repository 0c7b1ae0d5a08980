"""Write one version's state: the snapshot classified against the state chain before it (one
pass over the snapshot), as a whole base or only its changes, and its counts.

The IO around the pure classification (:mod:`diffcdc.core.classify`): the per-snapshot step
(:mod:`diffcdc.engine.snapshot`) and ``diffcdc repair`` (:mod:`diffcdc.engine.repair`) write
state through it, ``verify`` and ``repair`` read a version's state with :func:`state_schema`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StructField, StructType

from diffcdc.core.classify import (
    CHANGE,
    DUP,
    MOVED,
    RESERVED_PREFIX,
    ClassifyScope,
    classify,
    delta_counts,
    delta_rows,
    state_counts,
    state_metrics,
)
from diffcdc.core.fingerprint import (
    fingerprint_columns,
    fingerprint_exprs,
)
from diffcdc.core.normalize import NO_RULES, Normalizers, register_functions
from diffcdc.core.scope import SCOPED
from diffcdc.core.sql import quote
from diffcdc.engine.recreate import (
    HashRule,
)
from diffcdc.errors import StateError
from diffcdc.spark.paths import literal_path, read_written, spark_path
from diffcdc.staged_files import StagedFile, StagedFolder, in_process
from diffcdc.state.commit import (
    CommitRecord,
    Counts,
)

#: A snapshot and previous state of at most this many bytes of files together are classified
#: and diffed in one task each: no shuffle, no broadcast, each a Spark job fewer (a small table's
#: jobs cost more than its rows; see benchmarks/README.md).
ONE_TASK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class WrittenState:
    """A state version just written: its counts, the schema it was written with, its data
    files (listed once, for the counts and the state manifest) and whether it is a delta."""

    counts: dict[str, int]
    schema: StructType
    files: list[StagedFile] = field(compare=False)  # where, not what: equal states compare equal
    delta: bool = False
    #: Classified in one task (small inputs): the change set is picked in one task too.
    one_task: bool = field(default=False, compare=False)


def state_keys(counts: Counts) -> int:
    """The keys in a committed version's state (its live rows: one per key)."""
    return counts.inserted + counts.updated + counts.unchanged + counts.kept


def write_state(
    spark: SparkSession,
    df: DataFrame,
    previous: Sequence[str],
    keys: list[str],
    exclude: list[str],
    bits: int,
    target: str,
    table: str,
    *,
    previous_keys: int | None = None,
    schema: StructType | None = None,
    input_bytes: int | None = None,
    normalize: Normalizers = NO_RULES,
    compared: HashRule | None = None,
    scope: ClassifyScope | None = None,
) -> WrittenState:
    """Classify ``df`` against the state whose chain is at ``previous`` (base first; empty:
    nothing), write it to ``target`` and return its counts (also ``diffcdc repair``'s way to
    rebuild a state). With ``previous_keys`` (the keys of that state) only the changes are
    written, a delta; without, every key, a base. ``schema`` is the previous state's
    (:func:`state_schema`; None: read from its base's footer). ``input_bytes``: the size of
    the snapshot's and the previous state's files; up to :data:`ONE_TASK_BYTES` they are
    classified in one task, without a shuffle (None: not known, shuffled). ``normalize``:
    the normalizers the fingerprints are computed with; ``compared``: the previous state's
    rule, when it differs (a re-fingerprint: the snapshot is compared under it, the state
    keeps the fingerprints of ``exclude`` and ``normalize``; give no ``previous_keys``).
    ``scope``: what the snapshot covers (:mod:`diffcdc.core.scope`; its state rows keep the
    scope's values)."""
    register_functions(spark, normalize)
    fp_cols = fingerprint_columns(bits)
    stored: list[str] = []
    compare_exprs = []
    if compared is not None:
        register_functions(spark, compared.normalize)
        stored = [f"{RESERVED_PREFIX}_stored{c}" for c in fp_cols]
        compare_exprs = fingerprint_exprs(df.schema, keys, compared.exclude, bits, compared.normalize)
    new_exprs = fingerprint_exprs(df.schema, keys, exclude, bits, normalize)
    if compared is not None:
        new_exprs = [e.alias(n) for e, n in zip(new_exprs, stored)]
    slots = [] if scope is None else [
        F.col(quote(c)).alias(scope.slots.slot(c)) for c in scope.slots.stored]
    narrow = df.select(*[quote(k) for k in keys], *compare_exprs, *new_exprs, *slots)
    old: list[DataFrame] = []
    for path in previous:  # read with the state's schema: no job to infer it from a footer
        if schema is None:
            schema = spark.read.parquet(literal_path(spark_path(spark, path))).schema
        old.append(read_written(spark, path, schema))
    one_task = input_bytes is not None and input_bytes <= ONE_TASK_BYTES
    classified = classify(narrow, old, keys, fp_cols, one_task=one_task, stored=stored,
                          scope=scope)
    if previous_keys is not None:
        classified = delta_rows(classified, keys)
    if scope is not None:
        classified = classified.drop(MOVED)
    classified.write.mode("error").option("compression", "zstd").parquet(
        spark_path(spark, target))
    # The counts come from the state just written (a narrow scan with generated code): an
    # ``observe`` on the write evaluated them row by row and cost ~0.7 s at 5M rows. A small
    # state on this machine's disk is counted right here: a Spark job would cost more.
    written = classified.schema
    files = StagedFolder(spark, target, table=table).data_files()
    counts = _counts_in_process(spark, files, written.names[: len(keys)])
    if counts is None:
        (values,) = read_written(spark, target, written).agg(
            *state_metrics(keys, scoped=scope is not None)).collect()
        counts = {k: int(v or 0) for k, v in values.asDict().items()}
    if previous_keys is not None:
        try:
            counts = delta_counts(counts, previous_keys)
        except ValueError as exc:
            raise StateError(f"the state does not add up: {exc}", table=table, path=target,
                             hint="check it with 'diffcdc verify --state'") from None
    return WrittenState(counts, written, files, previous_keys is not None, one_task)


def state_schema(record: CommitRecord) -> StructType:
    """The columns of the state ``record``'s version wrote: its keys as its snapshot typed them,
    the fingerprint(s), the change kind and the row count (as :func:`classify` makes them)."""
    fields = {f.name.lower(): f for f in StructType.fromJson(record.schema).fields}
    return StructType([
        *[StructField(k, fields[k.lower()].dataType) for k in record.keys],
        *[StructField(c, LongType()) for c in fingerprint_columns(record.fingerprint.bits)],
        StructField(CHANGE, IntegerType()),
        StructField(DUP, LongType()),
        *_scope_fields(record, fields),
    ])


def _scope_fields(record: CommitRecord, fields: dict[str, StructField]) -> list[StructField]:
    """A scoped version's state columns: whether a row's scope values are known, and the
    values of each column the scope keeps."""
    if record.scope is None:
        return []
    return [StructField(SCOPED, BooleanType()),
            *[StructField(f"__diffcdc_scope{i}", fields[c.lower()].dataType)
              for i, c in enumerate(record.scope.stored)]]


def _counts_in_process(
    spark: SparkSession, files: list[StagedFile], keys: list[str]
) -> dict[str, int] | None:
    """The counts of the state in ``files`` read in this process, or None when it is too
    large for that or not on this machine's disk."""
    if any(f.local is None for f in files) or not in_process(spark, sum(f.size for f in files)):
        return None
    return state_counts((pq.read_table(f.local) for f in files if f.local), keys)
