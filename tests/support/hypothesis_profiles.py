"""Hypothesis profiles: few examples in the default tier, every test's own count in the full run.

A property test states how many examples it runs in the full run, ``@settings(max_examples=
examples(60))``; the profile scales that count by its own ``max_examples`` over Hypothesis'
default of 100:

* ``default`` (loaded by tests/conftest.py): ``max_examples=10``, a tenth of each test's count,
  at least one (60 → 6, 12 → 2, 6 → 1);
* ``full`` (``python -m pytest --hypothesis-profile=full``, the whole suite in ``.ci/run``):
  ``max_examples=100``, each test's own count (60 → 60).

Both start from the settings in force when tests/conftest.py registers them (e.g. Hypothesis'
own ``ci`` profile on a CI machine), changing only ``max_examples``.
"""

from __future__ import annotations

import math

from hypothesis import settings

DEFAULT = "default"
FULL = "full"
#: Hypothesis' own default ``max_examples``: a profile with it runs each test's own count.
BASE_EXAMPLES = 100
DEFAULT_EXAMPLES = 10


def register() -> None:
    """Register ``default`` and ``full`` on top of the current settings; load ``default``
    (``--hypothesis-profile`` loads another after this, when pytest is configured)."""
    current = settings.default
    settings.register_profile(DEFAULT, parent=current, max_examples=DEFAULT_EXAMPLES)
    settings.register_profile(FULL, parent=current, max_examples=BASE_EXAMPLES)
    settings.load_profile(DEFAULT)


def examples(full: int) -> int:
    """A test's example count under the loaded profile: ``full`` in the full profile, scaled
    by the profile's ``max_examples`` otherwise (at least 1). Call it where the test is
    defined (a decorator argument): the profile is loaded before test modules are imported."""
    scaled = math.ceil(full * settings.default.max_examples / BASE_EXAMPLES)
    return max(1, scaled)
