"""What the tests share: helpers, the loopback server harnesses, the sink kinds of the contract
tests, the fixtures several modules take (:mod:`tests.support.fixtures`, a pytest plugin
registered by tests/conftest.py). No test module imports another; they import from here.
"""
