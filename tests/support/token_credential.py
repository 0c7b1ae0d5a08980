"""A fake Azure credential for the loopback DFS server's bearer-token checks."""

from __future__ import annotations

import time

from azure.core.credentials import AccessToken


class FakeTokenCredential:
    """A TokenCredential that hands out a fixed token and remembers the scopes asked for."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **_kwargs: object) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)
