"""Secrets a config names but never holds: a database password read from the environment
variable its ``password_env`` names (the JDBC source, the PostgreSQL sink)."""

from __future__ import annotations

import os

from diffcdc.errors import ConfigError


def env_password(env: str | None, table: str, whose: str = "") -> str | None:
    """The value of the variable ``env`` (None: no ``password_env`` set); an unset variable is a
    one-line config error naming the table, ``whose`` password it is (e.g. ``"sink pg: "``) and
    the way out."""
    if env is None:
        return None
    value = os.environ.get(env)
    if value is None:
        raise ConfigError(f"{whose}environment variable {env} (password_env) is not set",
                          table=table, hint=f"export {env} with the database password before the run")
    return value
