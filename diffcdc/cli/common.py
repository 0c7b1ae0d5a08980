"""What several commands share: finding a table in a config, the state root, its checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diffcdc.cli.settings import table_from_options, url_data
from diffcdc.errors import UsageError
from diffcdc.sinks.openmirroring.shorthand import TABLE_LEVEL

if TYPE_CHECKING:
    from diffcdc.config import RunConfig, TableConfig
    from diffcdc.state.root import StateRoot


def config_table(config: Any, name: str, path: str) -> Any:
    """The table called ``name`` in a loaded config, or a usage error naming the file."""
    table = next((t for t in config.tables if t.name == name), None)
    if table is None:
        raise UsageError(f"--table {name} is not in the config", path=path)
    return table


def error_fields(error: dict[str, Any]) -> dict[str, Any]:
    return {k: error.get(k) for k in ("message", "table", "snapshot", "path", "hint")}


def state_root_of(given: str | None, config: Any | None) -> Any:
    """The state root a command works on: ``--state`` (a URL there takes ``state_data`` and
    ``state_options`` from the config, a folder a URL ``state_data``), else the config's,
    else ``./state``."""
    from diffcdc.state.root import StateRoot, is_url

    if config is None:
        return StateRoot(given or "state")
    if not given:
        return config.state_root()
    if is_url(given):
        return StateRoot(given, config.state_data, config.state_options)
    return StateRoot(given, url_data(config.state_data))


#: The source of a table located by its landing root alone (never read).
_NO_SOURCE = {"type": "dataframe", "description": "none: the table is located by --landing"}


@dataclass(frozen=True)
class Located:
    """The table a command names, its state root, and the config file it came from."""

    table: TableConfig
    state_root: StateRoot
    #: The loaded ``--config`` (None: the table is located by ``--landing`` alone).
    config: RunConfig | None


def located_table(args: Any, command: str) -> Located:
    """The table a command names (from ``--config``, loaded once, or only its location from
    ``--landing``) and the state root; ``--landing`` overrides a configured landing root, and
    ``--landing-option`` values are added to the table's landing zones."""
    from diffcdc.config_file import load_config

    TABLE_LEVEL.check_args(args)
    config = None
    if args.config:
        config = load_config(args.config)
        table = config_table(config, args.table, args.config)
        if args.landing:
            table = table.with_table_fields(landing=args.landing)
    elif args.landing:
        # Only the location matters here; source and keys are placeholders (no folder: it
        # could not lie apart from every landing root).
        table = table_from_options(name=args.table, source=_NO_SOURCE, keys=["-"],
                                   landing=args.landing, schema_name=args.schema_name)
    else:
        raise UsageError(f"{command} needs --landing or --config", hint="give one of them")
    if args.landing_options:
        table = table.with_table_fields(landing_options=dict(args.landing_options))
    state_root = state_root_of(args.state, config)
    check_state_owner(table, state_root)
    return Located(table, state_root, config)


def check_state_owner(table: Any, state_root: Any) -> None:
    """Refuse a table whose state folder holds another table (see diffcdc.state.owner)."""
    from diffcdc.state.owner import check_owner
    from diffcdc.state.store import TableState

    check_owner(TableState(state_root, table.state_name), table.name, table.schema_name)
