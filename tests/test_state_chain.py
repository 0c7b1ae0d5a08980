"""Which folders make up a version's state (a base and deltas), when compaction is due, and
what a damaged link is reported as — pure logic over commit records, no Spark."""

from __future__ import annotations

import pytest

from diffcdc.errors import StateError
from diffcdc.state.chain import StateLink, chain_damage, compaction_due, state_chain
from diffcdc.state.commit import CommitRecord, Counts, Fingerprint
from diffcdc.state.integrity import StateFile, StateManifest
from diffcdc.state.records import Commit


def _commit(version: int, parent: int | None, rows: int = 10) -> Commit:
    manifest = StateManifest((StateFile("part-0.parquet", 100, rows, "x"),), rows)
    record = CommitRecord(
        version=version, table="T", run_id="r", snapshot_id=f"{version}.parquet",
        version_dir=f"versions/{version}", state_path=f"versions/{version}/state", keys=["id"],
        exclude=[], schema={}, fingerprint=Fingerprint(1, 64), counts=Counts(rows, 0, 0, 0, 0),
        state_manifest=manifest, state_parent=parent,
    )
    return Commit(record, frozenset())


def test_a_chain_walks_back_to_its_base():
    commits = [_commit(1, None), _commit(2, 1), _commit(3, 2), _commit(4, None), _commit(5, 4)]
    assert [(link.version, link.delta) for link in state_chain(commits)] == [(4, False), (5, True)]
    assert [link.version for link in state_chain(commits, 3)] == [1, 2, 3]
    assert [link.version for link in state_chain(commits, 1)] == [1]


def test_a_chain_with_a_missing_or_later_parent_is_refused():
    with pytest.raises(StateError, match="builds on version 2, which is not in the commit log"):
        state_chain([_commit(1, None), _commit(3, 2)])
    with pytest.raises(StateError, match="not an earlier one"):
        state_chain([_commit(1, None), _commit(2, 2)])


def test_compaction_is_due_past_either_threshold():
    base = StateLink(1, "b", StateManifest((), 1000), False)

    def deltas(*rows):
        return [StateLink(2 + i, "d", StateManifest((), n), True) for i, n in enumerate(rows)]

    assert not compaction_due([base], 1000)
    assert not compaction_due([base, *deltas(200, 200)], 1000, max_delta_ratio=0.5)
    assert compaction_due([base, *deltas(300, 201)], 1000, max_delta_ratio=0.5)  # 501 rows
    assert compaction_due([base, *deltas(1, 1, 1)], 1000, max_deltas=3)
    assert not compaction_due([base, *deltas(1, 1)], 1000, max_deltas=3)
    assert compaction_due([base], 1000, max_deltas=0)  # a base every version
    unknown = StateLink(2, "d", None, True)  # a delta without a manifest: its size is unknown
    assert compaction_due([base, unknown], 1000)


def test_the_first_damaged_link_is_named(tmp_path):
    for version in (1, 2):  # both folders there, their listed part files not
        (tmp_path / f"versions/{version}/state").mkdir(parents=True)
    commits = [_commit(1, None), _commit(2, 1)]
    found = chain_damage(str(tmp_path), state_chain(commits), checksums=False)
    assert found is not None and found[0].version == 1 and found[1].reason == "the file is missing"
