"""Normalizers give the same fingerprints on PySpark 3.5 (a subprocess in that environment),
on this PySpark and in the reference (issue 41.4): a table keeps its fingerprints when its
Spark moves between 3.5 (Databricks LTS) and 4.x (Fabric)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.normalized_golden import normalized_fingerprints, reference_fingerprints
from tests.support.spark35 import ROOT, checkout_env, spark35_python

pytestmark = pytest.mark.slow


def test_normalized_fingerprints_are_the_same_on_spark35_and_here(spark):
    python = spark35_python()
    script = ("import json; from diffcdc.spark.session import build_spark; "
              "from tests.support.normalized_golden import normalized_fingerprints; "
              "print(json.dumps(normalized_fingerprints(build_spark('local[1]'))))")
    done = subprocess.run([python, "-c", script], cwd=ROOT, env=checkout_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    on_35 = [tuple(fp) for fp in json.loads(done.stdout.strip().splitlines()[-1])]
    assert on_35 == normalized_fingerprints(spark) == reference_fingerprints()
