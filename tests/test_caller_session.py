"""``run_dataframe`` in a caller's own session (a notebook): the caller's DataFrame is evaluated
under the caller's settings, and the session comes back as it was handed over, also after a
failed run (issue 29.4). Over every sink: each one's output replays to the instants the caller
meant.
"""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import diffcdc
from diffcdc.config import TableConfig
from diffcdc.engine.verify import verify_table
from diffcdc.errors import InputRefused
from diffcdc.spark.settings import SESSION_KEYS
from tests.support.sink_kinds import KINDS

pytestmark = pytest.mark.slow

#: A caller whose session differs from diffcdc's in every setting diffcdc sets, and more.
CALLER = {
    "spark.sql.session.timeZone": "America/New_York",
    "spark.sql.parquet.outputTimestampType": "INT96",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
    "spark.sql.shuffle.partitions": "3",
}
WATCHED = tuple(dict.fromkeys((*CALLER, *SESSION_KEYS)))

CSV = "k,at,v\n1,2026-01-15 08:30:00,a\n2,2026-07-01 23:15:00,b\n"
#: What the CSV's zone-less times mean in New York: EST (-5) in January, EDT (-4) in July.
MEANT = [dt.datetime(2026, 1, 15, 13, 30, tzinfo=dt.timezone.utc),
         dt.datetime(2026, 7, 2, 3, 15, tzinfo=dt.timezone.utc)]


def _settings(spark) -> dict[str, str | None]:
    return {key: spark.conf.get(key, None) for key in WATCHED}


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_the_callers_frame_means_what_it_means_and_the_session_is_left_as_found(
        spark, servers, kind, tmp_path):
    (tmp_path / "in.csv").write_text(CSV)
    state = str(tmp_path / "state")
    sinks = [kind.entry(str(tmp_path), servers)]
    ours = _settings(spark)
    try:
        for key, value in CALLER.items():
            spark.conf.set(key, value)
        spark.conf.unset("spark.sql.parquet.int96RebaseModeInWrite")  # never set by the caller
        before = _settings(spark)
        assert before["spark.sql.parquet.int96RebaseModeInWrite"] is None
        df = spark.read.option("header", True).schema("k INT, at TIMESTAMP, v STRING").csv(
            str(tmp_path / "in.csv"))
        micros = [r[0] for r in df.selectExpr("unix_micros(at)").collect()]
        assert micros == [int(m.timestamp()) * 1_000_000 for m in MEANT]  # as the caller sees it

        report = diffcdc.run_dataframe(df, table="T", keys=["k"], sinks=sinks, state=state,
                                       snapshot_id="001")
        assert report.snapshots[0].inserted == 2
        assert _settings(spark) == before

        twice = df.unionByName(df)  # a failing run: duplicate keys
        with pytest.raises(InputRefused, match="keys_unique"):
            diffcdc.run_dataframe(twice, table="T", keys=["k"], sinks=sinks, state=state,
                                  snapshot_id="002")
        assert _settings(spark) == before
    finally:
        for key, value in ours.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

    expected = str(tmp_path / "expected.parquet")
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int32()),
                             "at": pa.array(MEANT, pa.timestamp("us", tz="UTC")),
                             "v": ["a", "b"]}), expected)
    table = TableConfig(name="T", source={"type": "dataframe"}, keys=["k"], sinks=sinks)
    results = verify_table(spark, table, state, expected)
    assert results and all(r.identical for r in results.values()), {
        k: r.to_dict() for k, r in results.items()}
    assert os.path.isdir(state)
