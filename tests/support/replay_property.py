"""The replay property's body: replaying the landing files reproduces every snapshot exactly,
with minimal changes (the snapshots from :func:`tests.support.snapshots.snapshot_sequences`)."""

from __future__ import annotations

from tests.support.snapshots import snapshot_table
from tests.support.workspace import Workspace, expected_counts


def check_replay_property(spark, ws: Workspace, snapshots: list[dict]) -> None:
    """The property's body, for any workspace (local or remote landing root).

    ``ws`` has keys (k1, k2) and at most 4 rows per landing file.
    """
    ids = [f"{i:08d}.parquet" for i in range(1, len(snapshots) + 1)]
    for i, (sid, rows) in enumerate(zip(ids, snapshots)):
        ws.write(sid, snapshot_table(rows, seed=i))
    report = ws.run(spark)
    assert [s.snapshot_id for s in report.snapshots] == ids
    previous: dict = {}
    last_seq = 0
    for sid, rows, result in zip(ids, snapshots, report.snapshots):
        expected = expected_counts(previous, rows)
        got = {k: getattr(result, k) for k in ("inserted", "updated", "deleted")}
        assert got == expected, sid  # minimal: exactly the rows that changed
        last_seq += len(result.files)
        ws.assert_mirror_equals(spark, sid, upto=last_seq)
        previous = rows
    ws.assert_mirror_equals(spark, ids[-1])
    # every file is non-empty, at most max_rows_per_file rows, numbered consecutively
    files = ws.data_files()
    assert files == [f"{n:020d}.parquet" for n in range(1, len(files) + 1)]
    initial = set(report.snapshots[0].files)
    for name in files:
        rows = ws.landing_rows(name)
        assert 0 < len(rows) <= 4
        assert (list(rows[0])[-1] == "__rowMarker__") == (name not in initial)
    # rerunning a finished run is a no-op
    assert ws.run(spark).outcome == "nothing to do"
    assert ws.data_files() == files
