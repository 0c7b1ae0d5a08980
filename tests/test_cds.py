"""The JVM class-data-sharing archive: written by a first run, used by the next, and a
damaged or foreign archive falls back silently (diffcdc.cds)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_JOB = (
    "from diffcdc.spark.session import build_spark\n"
    "s = build_spark('local[1]')\n"
    "assert s.range(5).count() == 5\n"
    "print(s.sparkContext.getConf().get('spark.driver.extraJavaOptions'))\n"
)


def run_job(cache: str) -> str:
    env = {**os.environ, "XDG_CACHE_HOME": cache, "DIFFCDC_CDS": "1", "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", _JOB], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_first_run_writes_the_archive_the_next_uses_it(tmp_path):
    cache = str(tmp_path / "cache")
    first = run_job(cache)
    assert "-XX:ArchiveClassesAtExit=" in first
    folder = os.path.join(cache, "diffcdc", "cds")
    deadline = time.time() + 120  # the JVM writes the archive as it exits
    while time.time() < deadline and not glob.glob(os.path.join(folder, "*.tmp.jsa")):
        time.sleep(1)
    time.sleep(8)  # let it finish and settle
    second = run_job(cache)
    (archive,) = glob.glob(os.path.join(folder, "*.jsa"))
    assert not archive.endswith(".tmp.jsa")
    assert f"-XX:SharedArchiveFile={archive}" in second
    os.chmod(archive, 0o644)
    with open(archive, "r+b") as handle:  # a damaged archive: the JVM ignores it
        handle.write(b"\0" * 4096)
    assert f"-XX:SharedArchiveFile={archive}" in run_job(cache)
