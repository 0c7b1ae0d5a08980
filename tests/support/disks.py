"""Real disks that fail, for a sink's folder: a read-only bind mount and a small tmpfs filled up.

Both need the right to mount (root with CAP_SYS_ADMIN, as on the CI image); where it is
missing a test that needs them is skipped, saying so. ``chmod`` is no substitute: it does not
stop root. Every mount is undone when the context ends, also when the test fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator

import pytest


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {done.stderr.strip()}")


def _umount(folder: str) -> None:
    subprocess.run(["umount", folder], capture_output=True, check=False)


def can_mount() -> bool:
    """Whether this process may mount (tried once with a tiny tmpfs)."""
    if os.geteuid() != 0:
        return False
    import tempfile

    with tempfile.TemporaryDirectory() as probe:
        try:
            _mount("-t", "tmpfs", "-o", "size=16k", "tmpfs", probe)
        except OSError:
            return False
        _umount(probe)
    return True


def need_mounts() -> None:
    """Skip the calling test where mounting is not allowed."""
    if not can_mount():
        pytest.skip("needs the right to mount (a read-only bind mount, a small tmpfs)")


@contextlib.contextmanager
def small_disk(folder: str, size: str = "4m") -> Iterator[str]:
    """A tmpfs of ``size`` mounted at ``folder`` (made if missing) for the context."""
    os.makedirs(folder, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder)
    try:
        yield folder
    finally:
        _umount(folder)


@contextlib.contextmanager
def read_only(folder: str) -> Iterator[str]:
    """``folder`` bind-mounted read-only onto itself for the context: every write into it
    fails with EROFS, reads go on; writable again afterwards."""
    _mount("--bind", folder, folder)
    try:
        _mount("-o", "remount,ro,bind", folder)
        yield folder
    finally:
        _umount(folder)


@contextlib.contextmanager
def full(folder: str) -> Iterator[str]:
    """The disk of ``folder`` filled up (a file written until ENOSPC) for the context; the
    file is removed afterwards (the disk has room again)."""
    filler = os.path.join(folder, "filler.bin")
    block = b"\0" * (64 * 1024)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while True:
            try:
                os.write(fd, block[: 4096] if os.fstatvfs(fd).f_bavail < 16 else block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    try:
        yield folder
    finally:
        os.unlink(filler)
