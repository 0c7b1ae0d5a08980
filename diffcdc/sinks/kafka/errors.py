"""Errors of the Kafka sink; each is a :class:`~diffcdc.errors.DiffcdcError` with its exit code."""

from __future__ import annotations

from diffcdc.errors import DiffcdcError, InputRefused


class KafkaUnavailable(DiffcdcError):
    """The broker cannot be reached or did not answer in time (exit 1; the next run retries)."""

    transient = True


class KafkaPublishError(DiffcdcError):
    """The broker refused an operation (authorization, fencing, a missing partition: exit 1)."""


class StandaloneRefused(InputRefused):
    """A standalone (insert-only) target is handed updates or deletes (exit 3)."""


class MessageTooLarge(InputRefused):
    """One record is larger than a whole message may be (exit 3)."""
