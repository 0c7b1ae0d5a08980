"""Which tests the Hypothesis profile changes (tests/conftest.py marks them ``property``).

CI runs the default tier first, then the whole suite under ``--hypothesis-profile=full``
without the default tier's tests that the profile does not change: only a property test runs
more examples under ``full``, so only those run twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

#: What a test's source holds when it runs a Hypothesis test: its own decorator, or one on a
#: function it defines and calls (a parametrized test's inner ``@given`` body).
GIVEN = "@given("


def is_property_test(function: Callable[..., Any] | None) -> bool:
    """Whether the Hypothesis profile changes what the test ``function`` runs: it is a
    ``@given`` test or defines one in its body. (A ``@given`` function kept in tests/support
    and called from a test is not seen: define it in the test.)"""
    if function is None:
        return False
    if getattr(function, "is_hypothesis_test", False):
        return True
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return GIVEN in source
