"""Values kept per Spark session for as long as the session lives (a Spark Connect session's
watch and progress feed, a classic session's Hadoop ``Path`` class ...).

Keyed by the session object itself, weakly: no ``id()`` that a later session may be given
again, and an entry goes when its session is stopped (dropped at the next look-up) or
collected. Two sessions never share an entry.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def stopped(spark: Any) -> bool:
    """Whether ``spark`` was stopped: a Spark Connect session whose client is closed, a classic
    one whose SparkContext was stopped."""
    is_stopped = getattr(spark, "is_stopped", None)
    if isinstance(is_stopped, bool):  # Spark Connect: its client is closed
        return is_stopped
    context = getattr(spark, "_sc", None)
    return context is not None and getattr(context, "_jsc", None) is None


class PerSession(Generic[T]):
    """A value of type ``T`` per live Spark session.

    ``outlives_stop``: an entry to keep after its session was stopped (until the session is
    collected), e.g. the watch that stopped a Spark Connect session whose server was lost and
    still has to say why. The value must not refer to its session (it would keep it alive).
    """

    def __init__(self, outlives_stop: Callable[[T], bool] | None = None) -> None:
        self._values: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._outlives_stop = outlives_stop
        self._lock = threading.Lock()

    def get(self, spark: Any) -> T | None:
        """``spark``'s value, None when it has none (or was stopped)."""
        with self._lock:
            self._drop_stopped()
            return self._values.get(spark)

    def get_or_make(self, spark: Any, make: Callable[[], T]) -> T:
        """``spark``'s value, made by ``make`` the first time it is asked for."""
        with self._lock:
            self._drop_stopped()
            found = self._values.get(spark)
            if found is None:
                found = self._values[spark] = make()
            return found

    def put(self, spark: Any, value: T) -> T | None:
        """Set ``spark``'s value; the value it had before (None: none)."""
        with self._lock:
            self._drop_stopped()
            earlier = self._values.get(spark)
            self._values[spark] = value
            return earlier

    def items(self) -> list[tuple[Any, T]]:
        """(session, value) of every live session that has a value."""
        with self._lock:
            self._drop_stopped()
            return list(self._values.items())

    def __len__(self) -> int:
        return len(self.items())

    def _drop_stopped(self) -> None:
        for spark, value in list(self._values.items()):
            if stopped(spark) and not (self._outlives_stop and self._outlives_stop(value)):
                del self._values[spark]
