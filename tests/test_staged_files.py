"""Staged output written by executors is found, named and removed on the file system Spark
wrote it to (the byte store of its path, which Hadoop resolves), its bytes read by the
executors, and read back with the schema it was written with."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from diffcdc import staged_files
from diffcdc.errors import StateError
from diffcdc.sinks.openmirroring.landing import file_sha256
from diffcdc.sinks.openmirroring.staging import stage_parquet_files
from diffcdc.sinks.openmirroring.text import TextFormat
from diffcdc.spark.paths import read_written, spark_path
from diffcdc.staged_files import StagedFolder, on_executors
from diffcdc.state.integrity import StateFile, checksum, describe_state, footer_rows
from diffcdc.storage.local import LocalStore
from diffcdc.storage.paths import data_files


def _forbid_driver_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the driver reads a staged file's bytes (executors run elsewhere).

    Small inputs on ``local[...]`` are worked on in the driver's process (its own disk);
    here every input goes to the executors, as on a cluster. The driver lists, renames and
    removes through the byte store (metadata only).
    """
    monkeypatch.setattr(staged_files, "IN_PROCESS_BYTES", -1)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"driver-side read of staged output: {args}")

    monkeypatch.setattr(LocalStore, "open_read", forbidden)
    monkeypatch.setattr(LocalStore, "read", forbidden)


def test_folder_lists_renames_and_deletes_where_spark_wrote(spark, tmp_path):
    raw = str(tmp_path / "raw [1]")
    spark.range(10).repartition(2).write.parquet(raw)
    folder = StagedFolder(spark, raw, table="T")
    parts = [f for f in folder.files() if f.name.endswith(".parquet")]
    assert len(parts) == 2
    for part in parts:
        assert part.local == part.path == os.path.join(raw, part.name)
        assert part.size == os.path.getsize(part.local)
    out = StagedFolder(spark, "file:" + str(tmp_path / "out"), table="T")  # Hadoop's own form
    assert out.folder == str(tmp_path / "out")
    out.mkdirs()
    out.rename_in(parts[0].path, "00000000000000000001.parquet")
    # the checksum file Hadoop keeps beside a part stays behind: consumers see only our name
    assert os.listdir(tmp_path / "out") == ["00000000000000000001.parquet"]
    assert pq.read_table(str(tmp_path / "out" / "00000000000000000001.parquet")).num_rows > 0
    out.rename_in(parts[1].path, "2024-01-01T00:00:00+00:00")  # a snapshot id as a name
    assert os.path.isfile(tmp_path / "out" / "2024-01-01T00:00:00+00:00")
    with pytest.raises(StateError, match="could not rename staged file") as err:
        out.rename_in(parts[0].path, "00000000000000000002.parquet")
    assert err.value.table == "T"
    folder.delete()
    assert not os.path.exists(raw)
    assert folder.files() == []


def test_on_executors_collects_small_results(spark):
    def square(items):
        for i in items:
            yield i, i * i

    assert sorted(on_executors(spark, [1, 2, 3], square)) == [(1, 1), (2, 4), (3, 9)]
    assert on_executors(spark, [], square) == []


def _jobs(spark) -> int:
    """Jobs started so far: the newest job id + 1 (job ids only grow; Spark keeps only the
    newest ``spark.ui.retainedJobs`` of them, so counting the retained ids stops growing)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1


def test_small_inputs_on_a_local_master_are_worked_on_in_process(spark, monkeypatch):
    def where(items):
        for i in items:
            yield i, os.getpid()

    items = [1, 2, 3]
    jobs = _jobs(spark)
    small = on_executors(spark, items, where, input_bytes=staged_files.IN_PROCESS_BYTES)
    assert _jobs(spark) == jobs and small == [(i, os.getpid()) for i in items]
    large = on_executors(spark, items, where, input_bytes=staged_files.IN_PROCESS_BYTES + 1)
    assert _jobs(spark) > jobs and sorted(i for i, _ in large) == items
    assert all(pid != os.getpid() for _, pid in large)  # Spark's Python workers
    unknown = on_executors(spark, items, where)  # no size given: always the executors
    assert all(pid != os.getpid() for _, pid in unknown)
    # on a cluster master even a tiny input goes to the executors that wrote it
    monkeypatch.setattr(spark.sparkContext, "master", "spark://h:7077")
    jobs = _jobs(spark)
    on_executors(spark, items, where, input_bytes=1)
    assert _jobs(spark) > jobs


def test_in_process_and_executor_manifests_agree(spark, tmp_path, monkeypatch):
    folder = str(tmp_path / "state")
    spark.range(0, 40).repartition(4).write.parquet(folder)
    here = describe_state(spark, folder, "T")
    monkeypatch.setattr(staged_files, "IN_PROCESS_BYTES", -1)
    assert describe_state(spark, folder, "T") == here and here.rows == 40


def test_a_small_state_is_counted_in_process_as_spark_counts_it(spark, tmp_path, monkeypatch):
    from diffcdc.engine.state_write import write_state

    rows = [(1, "a"), (2, None), (None, "c"), (3, "d"), (3, "e"), (4, "f")]
    df = spark.createDataFrame(rows, "id long, v string").repartition(2)
    old = str(tmp_path / "old")
    write_state(spark, df.where("id IS NULL OR id <> 4"), [], ["id"], [], 64, old, "T")
    jobs = _jobs(spark)
    here = write_state(spark, df.where("id IS NULL OR id <> 1"), [old], ["id"], [], 64, str(tmp_path / "a"), "T")
    jobs_here = _jobs(spark) - jobs
    monkeypatch.setattr(staged_files, "IN_PROCESS_BYTES", -1)
    jobs = _jobs(spark)
    spark_side = write_state(spark, df.where("id IS NULL OR id <> 1"), [old], ["id"], [], 64, str(tmp_path / "b"), "T")
    assert _jobs(spark) - jobs > jobs_here  # the counting job is not run for a small state
    assert here == spark_side
    assert (here.counts["inserted"], here.counts["deleted"], here.counts["duplicate_keys"],
            here.counts["null_keys"], here.counts["rows"]) == (1, 1, 1, 1, 5)


@pytest.mark.parametrize("text", [None, "csv"])
def test_landing_parts_are_staged_without_driver_reads(spark, tmp_path, monkeypatch, text):
    frame = spark.range(0, 25).selectExpr("id", "cast(id * 2 as string) as v").repartition(3)
    fmt = TextFormat(extension="csv") if text else None
    raw, out = str(tmp_path / "raw"), str(tmp_path / "landing")
    _forbid_driver_reads(monkeypatch)
    staged = stage_parquet_files(
        frame, raw, out, codec="none", max_rows_per_file=4, first_sequence=7, text=fmt, table="T"
    )
    monkeypatch.undo()
    assert [s.sequence for s in staged] == list(range(7, 7 + len(staged)))
    assert sum(s.rows for s in staged) == 25 and all(0 < s.rows <= 4 for s in staged)
    assert sorted(os.listdir(out)) == [s.name for s in staged]
    ids = []
    for s in staged:
        path = os.path.join(out, s.name)
        assert (s.size, s.sha256) == (os.path.getsize(path), file_sha256(path))
        if text:
            assert s.name.endswith(".csv")
            with open(path, "rb") as handle:
                rows = fmt.parse(handle.read().decode(fmt.encoding))
            assert rows[0] == ["id", "v"] and len(rows) - 1 == s.rows
            ids += [int(r[0]) for r in rows[1:]]
        else:
            ids += pq.read_table(path).column("id").to_pylist()
    assert sorted(ids) == list(range(25))


def test_state_manifest_is_computed_by_executors(spark, tmp_path, monkeypatch):
    folder = str(tmp_path / "state")
    spark.range(0, 30).repartition(3).write.parquet(os.path.join(folder, "a"))
    spark.range(0, 5).write.parquet(os.path.join(folder, "_skipped"))
    expected = [
        StateFile(name, os.path.getsize(p), footer_rows(p), checksum(p))
        for name in data_files(folder)
        for p in [os.path.join(folder, name)]
    ]
    assert len(expected) == 3 and all(f.name.startswith("a/part-") for f in expected)
    _forbid_driver_reads(monkeypatch)
    manifest = describe_state(spark, folder, "T")
    monkeypatch.undo()
    assert list(manifest.files) == expected and manifest.rows == 30


def test_a_folder_just_written_reads_back_as_spark_would_read_it_without_a_schema_job(
    spark, tmp_path
):
    frame = spark.sql(
        "SELECT id, CAST(id AS DECIMAL(20, 2)) AS d, named_struct('a', id, 'b', array(id, NULL)) AS s,"
        " map('k', CAST(NULL AS STRING)) AS m FROM range(5)"
    ).where("id IS NOT NULL")
    assert not frame.schema["id"].nullable  # what a writer's frame says; a reader says nullable
    path = str(tmp_path / "written [1]")
    frame.write.parquet(path)
    inferred = spark.read.parquet(path.replace("[", "\\[").replace("]", "\\]"))
    jobs = _jobs(spark)
    given = read_written(spark, path, frame.schema)
    assert _jobs(spark) == jobs  # no job to read a footer for the schema
    assert given.schema == inferred.schema
    assert sorted(given.collect()) == sorted(inferred.collect())


class _ConnectSession:
    """Stands for a Spark Connect session (no gateway to ask Hadoop): ``is_connect`` goes by
    the class's module."""


_ConnectSession.__module__ = "pyspark.sql.connect.session"


def test_over_connect_a_folder_is_taken_as_given_and_one_not_visible_here_is_refused(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    relative = StagedFolder(_ConnectSession(), "state/T/v1", table="T")  # type: ignore[arg-type]
    assert relative.folder == str(tmp_path / "state" / "T" / "v1")
    with pytest.raises(StateError) as gone:  # Spark wrote it where this process cannot see
        relative.data_files()
    assert "\n" not in str(gone.value)
    assert "Spark wrote" in str(gone.value) and "not visible to diffcdc here" in str(gone.value)
    os.makedirs(tmp_path / "state" / "T" / "v1")
    (tmp_path / "state" / "T" / "v1" / "part-0.parquet").write_bytes(b"x")
    assert [f.name for f in relative.data_files()] == ["part-0.parquet"]
    url = StagedFolder(_ConnectSession(), "webhdfs://nn:9870/s", table="T")  # type: ignore[arg-type]
    assert url.folder == "webhdfs://nn:9870/s"
    with pytest.raises(StateError, match="diffcdc's own reads do not reach"):
        StagedFolder(_ConnectSession(), "hdfs://nn/s", table="T")  # type: ignore[arg-type]
    # what Spark is told to read or write: the server resolves a relative path against its
    # own working folder, so it goes absolute
    assert spark_path(_ConnectSession(), "src/1.parquet") == str(tmp_path / "src" / "1.parquet")
    assert spark_path(_ConnectSession(), "/abs/x") == "/abs/x"
    assert spark_path(_ConnectSession(), "abfss://c@a.dfs.core.windows.net/x").startswith("abfss:")
