"""Dropping a landing table folder on a read-only disk (issue 38): a reload or drop fails at
once, saying so, instead of retrying for ``drop_timeout`` seconds and blaming the mirroring
service. Needs the right to mount (a read-only bind mount); skipped without it."""

from __future__ import annotations

import os
import time

import pytest

from diffcdc.errors import StorageError
from diffcdc.sinks.openmirroring.landing import drop_folder
from diffcdc.storage.local import LocalStore
from tests.support.disks import need_mounts, read_only


def test_a_folder_on_a_read_only_disk_is_not_waited_for(tmp_path):
    need_mounts()
    landing = str(tmp_path / "landing")
    os.makedirs(os.path.join(landing, "T"))
    with open(os.path.join(landing, "T", "00000000000000000001.parquet"), "wb") as handle:
        handle.write(b"x")
    store = LocalStore(landing)
    assert not store.read_only("T")
    with read_only(landing):
        assert store.read_only("T")
        started = time.monotonic()
        with pytest.raises(StorageError) as caught:
            drop_folder(store, "T", timeout=20, poll=0.05)
        assert time.monotonic() - started < 5
        text = str(caught.value)
        assert "the file system is read-only" in text and os.path.join(landing, "T") in text
        assert "mirroring service" not in text
        assert os.listdir(os.path.join(landing, "T"))  # nothing deleted
    drop_folder(store, "T", timeout=5)  # writable again: gone
    assert not os.path.exists(os.path.join(landing, "T"))
