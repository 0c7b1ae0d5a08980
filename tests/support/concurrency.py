"""Concurrency in tests: a clock the test sets, and a race of threads released at once."""

from __future__ import annotations

import threading


class Clock:
    """A clock for a lease: ``now`` is what the test sets."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def race(fn, n: int = 8) -> list:
    """Run ``fn`` in ``n`` threads released at once; their results."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - the result under test
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
