"""Arrow handed to delta-rs is never a slice: delta-rs (arrow-rs 59) panics importing a sliced
nested struct inside a callback that cannot unwind, and the whole process aborts (issue 38: the
names/types property test crashed pytest in the history MERGE)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from diffcdc.sinks.delta import history as scd2
from diffcdc.sinks.delta.feed import unsliced

UTC = dt.timezone.utc
NESTED = pa.struct([("a.b", pa.int32()), ("C c", pa.struct([("in.ner", pa.string())]))])


def _snapshot(keys: list[int], value: dict | None) -> pa.Table:
    return pa.table({"id": pa.array(keys, pa.int64()),
                     "s": pa.array([value] * len(keys), NESTED)})


def test_a_history_merge_that_closes_gone_and_updated_keys_of_a_nested_struct(tmp_path):
    # The merge source is the close rows (the gone keys, then the updated one: two chunks of
    # the key columns), then the opened row; its other columns are chunked otherwise, so a
    # stream of the table slices the nested struct. This aborted the process before.
    path = str(tmp_path / "history")
    one = scd2.Version(1, dt.datetime(2020, 1, 1, tzinfo=UTC))
    write_deltalake(path, scd2.image_rows(_snapshot([0, 1, 2, 3, 4], None), one))
    two = scd2.Version(2, dt.datetime(2020, 1, 2, tzinfo=UTC))
    table = DeltaTable(path)
    new_rows = _snapshot([0], {"a.b": 7, "C c": None})
    current = scd2.open_rows(table, ["id"], new_rows)
    gone = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64())})
    source = scd2.merge_source(new_rows, gone, current, ["id"], ["s"], scd2.Tracking(), two,
                               unchanged_possible=False)
    assert len({tuple(len(c) for c in col.chunks) for col in source.columns}) > 1
    scd2.merge(table, source, ["id"], two, CommitProperties())

    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    open_rows = [(r["id"], r["s"]) for r in rows if r[scd2.END_AT] is None]
    assert open_rows == [(0, {"a.b": 7, "C c": None})]
    assert sorted(r["id"] for r in rows if r[scd2.END_AT] == 2) == [0, 1, 2, 3, 4]


def test_unsliced_copies_only_the_sliced_batches():
    whole = pa.table({"id": pa.array(range(6), pa.int64()),
                      "s": pa.array([{"a.b": i, "C c": {"in.ner": str(i)}} for i in range(6)],
                                    NESTED)})
    ragged = pa.table({"id": pa.chunked_array([whole.column("id").chunk(0).slice(0, 4),
                                               whole.column("id").chunk(0).slice(4)]),
                       "s": whole.column("s")})
    for table in (ragged, whole.slice(2, 3), whole.slice(0, 0)):
        out = unsliced(table)
        assert out.equals(table)
        assert all(c.offset == 0 for col in out.columns for c in col.chunks)
        assert len({tuple(len(c) for c in col.chunks) for col in out.columns}) <= 1
    unchanged = unsliced(whole).column("id").chunk(0)
    assert unchanged.buffers()[1].address == whole.column("id").chunk(0).buffers()[1].address
