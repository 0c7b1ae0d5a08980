"""Measurement helpers: wall time plus peak RSS of a whole process tree (Python + JVM + ...).

psutil is not a dependency: the RSS of this process and all its descendants is read from
``/proc`` by a sampling thread (every 50 ms), which sees the JVM that PySpark starts as a child.

RSS counts a page once per process that maps it: PySpark's Python workers are forks of one
daemon and share most of its pages, so a moment with several workers alive adds the daemon's
~0.3 GiB once per worker although little new memory is used. The samplers therefore also
record the tree's peak PSS (proportional set size: a shared page counts 1/n in each of the n
processes mapping it), which sums to the memory the tree really holds.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # the command name may contain spaces/parentheses: parse after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def tree_pids(root: int) -> list[int]:
    """``root`` and all its live descendants."""
    children = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_rss(root: int | None = None) -> int:
    """Resident bytes of a process tree (default: this process)."""
    total = 0
    for pid in tree_pids(root or os.getpid()):
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_pss(root: int | None = None) -> int:
    """Proportional set size of a process tree (shared pages split among their mappers);
    0 where /proc has no ``smaps_rollup``."""
    total = 0
    for pid in tree_pids(root or os.getpid()):
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
                for line in handle:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, IndexError, ValueError):
            continue
    return total


class PeakSampler:
    """Samples ``tree_rss(root)`` and ``tree_pss(root)`` in a daemon thread; ``peak`` and
    ``peak_pss`` are the maxima seen."""

    def __init__(self, root: int | None = None, interval: float = 0.05) -> None:
        self.root = root or os.getpid()
        self.interval = interval
        self.peak = 0
        self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        self.peak = max(self.peak, tree_rss(self.root))
        self.peak_pss = max(self.peak_pss, tree_pss(self.root))

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakSampler:  # noqa: PYI034 - py310 has no typing.Self
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


@dataclass
class Measurement:
    """Wall seconds and peak tree RSS of one timed block."""

    seconds: float = 0.0
    peak_rss_bytes: int = 0
    rss_before_bytes: int = 0
    peak_pss_bytes: int = 0


@contextmanager
def measure() -> Iterator[Measurement]:
    """Time a block and record the peak RSS of this process tree while it runs."""
    result = Measurement(rss_before_bytes=tree_rss())
    with PeakSampler() as sampler:
        started = time.perf_counter()
        try:
            yield result
        finally:
            result.seconds = time.perf_counter() - started
    result.peak_rss_bytes = sampler.peak
    result.peak_pss_bytes = sampler.peak_pss


def du(path: str | None) -> int:
    """Bytes of all regular files under ``path`` (0 when it does not exist)."""
    if not path or not os.path.exists(path):
        return 0
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total
