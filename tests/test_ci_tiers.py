"""The ``property`` marker (tests/support/tiers.py): CI's whole-suite command runs the default
tier's tests again only where it is set, so a property test it misses would lose its full
example count."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.tiers import is_property_test


@settings(max_examples=1)
@given(st.integers())
def _decorated(n: int) -> None:
    assert isinstance(n, int)


def _defines_one(kind: str) -> None:
    @settings(max_examples=1)
    @given(st.integers())
    def body(n: int) -> None:
        assert isinstance(n, int), kind

    body()


def _plain(kind: str) -> None:
    assert kind


def test_a_given_test_and_a_test_defining_one_are_property_tests():
    assert is_property_test(_decorated)
    assert is_property_test(_defines_one)


def test_a_test_without_hypothesis_is_not_a_property_test():
    assert not is_property_test(_plain)
    assert not is_property_test(None)
    assert not is_property_test(len)  # no Python source
