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


def located_table(args: Any, command: str) -> tuple[Any, str]:
    """The table a command names (from ``--config``, or only its location from ``--landing``)
    and the state root; ``--landing`` overrides a configured landing root, and
    ``--landing-option`` values are added to the table's landing zones."""
    from diffcdc.config import load_config, table_from_args

    check_landing_arg(args.landing)
    state_root = args.state
    if args.config:
        config = load_config(args.config)
        table = config_table(config, args.table, args.config)
        if args.landing:
            table = table.with_landing(landing=args.landing)
        state_root = state_root or config.state
    elif args.landing:
        # Only the location matters here; source and keys are placeholders.
        table = table_from_args(name=args.table, source=".", keys=["-"], landing=args.landing,
                                schema_name=args.schema_name)
    else:
        raise UsageError(f"{command} needs --landing or --config", hint="give one of them")
    if args.landing_options:
        table = table.with_landing_options(dict(args.landing_options))
    return table, state_root or "state"
