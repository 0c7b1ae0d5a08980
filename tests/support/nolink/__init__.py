"""Make ``os.link`` (into one folder) and ``fcntl.flock`` fail with ENOTSUP, as on a mount
without them; see tests/support/nolink/sitecustomize.py."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from typing import Any

ENV = "DIFFCDC_TEST_NOLINK_UNDER"
HERE = os.path.dirname(os.path.abspath(__file__))


def _unsupported(*_: Any, **__: Any) -> None:
    raise OSError(errno.ENOTSUP, os.strerror(errno.ENOTSUP))


def disable(under: str, setattr_: Callable[[Any, str, Any], None] = setattr) -> None:
    """Disable ``os.link`` into ``under`` and every ``fcntl.flock`` (``setattr_``: e.g. pytest's
    ``monkeypatch.setattr``, so the test undoes it)."""
    root = os.path.abspath(under) + os.sep
    real_link = os.link

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.abspath(os.fsdecode(dst)).startswith(root):
            _unsupported()
        real_link(src, dst, *args, **kwargs)

    setattr_(os, "link", link)
    setattr_(fcntl, "flock", _unsupported)


def env_for(under: str) -> dict[str, str]:
    """Environment entries that make a subprocess see ``under`` as such a mount."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))  # tests/support/nolink
    path = os.pathsep.join(p for p in (HERE, repo, os.environ.get("PYTHONPATH", "")) if p)
    return {ENV: under, "PYTHONPATH": path}
