"""Property: replaying the landing files reproduces every snapshot exactly, with minimal changes.

Random snapshot sequences over a composite key with NULLs everywhere else, awkward types
(decimal, -0.0/NaN/inf doubles, binary, dates, UTC timestamps, nested struct/array/map),
NULL swaps, key changes, deletes and re-inserts of the same key, and a different column order
in every snapshot file.
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support.hypothesis_profiles import examples
from tests.support.replay_property import check_replay_property
from tests.support.snapshots import snapshot_sequences
from tests.support.workspace import Workspace


@pytest.mark.slow
@settings(max_examples=examples(12), deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
@given(snapshots=snapshot_sequences())
def test_replaying_landing_files_reproduces_every_snapshot(spark, snapshots):
    with tempfile.TemporaryDirectory() as root:
        check_replay_property(spark, Workspace(root, keys=("k1", "k2"), max_rows_per_file=4), snapshots)
