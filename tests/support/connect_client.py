"""A Python client of a Spark Connect server as a notebook is: ``run_dataframe`` on a DataFrame
of a Connect session, in a process without Java (tests/test_connect.py runs it with
:func:`tests.support.connect_server.client_env`).

``python -m tests.support.connect_client JOB.json`` reads what to do from the JSON file and
prints one JSON line: the run's report (or its error) and the session's settings before and
after.

* ``csv`` — read a CSV of zone-less times in the session's (the caller's) settings;
* ``long_job`` — after the run, a job whose tasks sleep that many seconds a row, for the
  progress display's feed;
* ``slow`` — ``rows`` rows in one partition, each made by a Python UDF that sleeps ``sleep``
  seconds (the copy's job runs long on the server: a client killed meanwhile leaves it
  running).
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
from typing import Any


def _frame(spark: Any, job: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    if job["frame"] == "csv":
        return spark.read.option("header", True).schema(job["schema"]).csv(job["csv"])
    pause = float(job["sleep"])

    @F.udf("string")
    def slow(i: int) -> str:
        import time as clock

        clock.sleep(pause)
        return f"{job['tag']}{i}"

    return spark.range(0, int(job["rows"]), 1, 1).select(
        F.col("id").alias("k"), slow("id").alias("v"))


def main(path: str) -> int:
    from pyspark.sql import SparkSession

    import diffcdc
    from diffcdc.cli.progress import active_stages
    from diffcdc.errors import DiffcdcError

    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    assert shutil.which("java") is None, "this client must not have Java"
    spark = SparkSession.builder.remote(job["remote"]).getOrCreate()
    for key, value in job.get("settings", {}).items():
        spark.conf.set(key, value)
    watched = job.get("watched", [])
    before = {k: spark.conf.get(k, None) for k in watched}
    stages: list[Any] = []
    stop = threading.Event()

    def watch() -> None:  # the progress display's source on Spark Connect
        seen: dict[int, float] = {}
        while not stop.wait(0.2):
            stages.extend(s.tasks for s in active_stages(spark, seen))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out: dict[str, Any] = {}
    try:
        report = diffcdc.run_dataframe(_frame(spark, job), **job["run"])
        out["report"] = report.to_dict()
        if job.get("long_job"):  # a job of some seconds: the server reports its progress
            from pyspark.sql import functions as F

            @F.udf("long")
            def slow(i: int) -> int:
                import time as clock

                clock.sleep(float(job["long_job"]))
                return i

            spark.range(0, 4, 1, 2).select(slow("id")).collect()
    except DiffcdcError as exc:
        out["error"] = {"type": type(exc).__name__, "message": str(exc)}
    finally:
        stop.set()
        watcher.join(5)
    out["before"] = before
    out["after"] = {k: spark.conf.get(k, None) for k in watched}
    out["stages_seen"] = len(stages)
    print(json.dumps(out, default=str))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
