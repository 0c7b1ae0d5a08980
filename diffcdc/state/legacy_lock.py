"""The ``.lock`` file of diffcdc before run leases, still honoured where it exists.

diffcdc before leases held ``flock`` on ``<table>/.lock`` during a run. While a state folder is
upgraded in place, an older diffcdc may still run on it (a second scheduler, a node not yet
upgraded): where the ``.lock`` file exists and the mount supports ``flock``, a run also takes it,
so such a run and this one refuse each other as before. Where ``flock`` is not supported (FUSE
and network mounts), only the lease applies. New state folders get no ``.lock`` file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator

from diffcdc.errors import ConcurrentRunError
from diffcdc.storage import paths


@contextlib.contextmanager
def legacy_flock(folder: str, table: str) -> Iterator[None]:
    """Hold ``flock`` on ``folder/.lock`` when that file exists and the mount supports it."""
    if paths.is_url(folder):  # state data on a URL was never written by such a version
        yield
        return
    path = os.path.join(folder, ".lock")
    try:
        handle = open(path, "r+")
    except (FileNotFoundError, NotADirectoryError):
        yield
        return
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise ConcurrentRunError(
                    "another diffcdc run (of a version before run leases) is working on this "
                    "table",
                    table=table,
                    path=path,
                    hint="wait for it to finish, and upgrade diffcdc wherever the table runs",
                ) from None
            # ENOTSUP/ENOLCK/EINVAL...: a mount without flock; the lease is the lock there
        yield
    finally:
        handle.close()
