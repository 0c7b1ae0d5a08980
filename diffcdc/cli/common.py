"""What several commands share: finding a table in a config, refusing secrets on URLs."""

from __future__ import annotations

from typing import Any

from diffcdc.errors import UsageError


def config_table(config: Any, name: str, path: str) -> Any:
    """The table called ``name`` in a loaded config, or a usage error naming the file."""
    table = next((t for t in config.tables if t.name == name), None)
    if table is None:
        raise UsageError(f"--table {name} is not in the config", path=path)
    return table


def check_landing_arg(landing: str | None) -> None:
    """Refuse a SAS token on a ``--landing`` URL (it would show in process lists)."""
    if landing and "://" in landing and "?" in landing:
        raise UsageError(
            "--landing must not carry a query string (a SAS token is a secret)",
            hint="export AZURE_STORAGE_SAS_TOKEN, or use sas_token / sas_token_env in the "
            "config file's landing_options",
        )


def error_fields(error: dict[str, Any]) -> dict[str, Any]:
    return {k: error.get(k) for k in ("message", "table", "snapshot", "path", "hint")}
