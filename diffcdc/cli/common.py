"""What several commands share: finding a table in a config, the state root, its checks."""

from __future__ import annotations

from typing import Any

from diffcdc.cli.settings import table_from_options, url_data
from diffcdc.errors import DiffcdcError, UsageError
from diffcdc.sinks.registry import TABLE_LEVEL


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


def located_table(args: Any, command: str) -> tuple[Any, Any]:
    """The table a command names (from ``--config``, or only its location from ``--landing``)
    and the state root; ``--landing`` overrides a configured landing root, and
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
        # Only the location matters here; source and keys are placeholders.
        table = table_from_options(name=args.table, source=".", keys=["-"], landing=args.landing,
                                   schema_name=args.schema_name)
    else:
        raise UsageError(f"{command} needs --landing or --config", hint="give one of them")
    if args.landing_options:
        table = table.with_table_fields(landing_options=dict(args.landing_options))
    state_root = state_root_of(args.state, config)
    check_state_owner(table, state_root)
    return table, state_root


def check_state_owner(table: Any, state_root: Any) -> None:
    """Refuse a table whose state folder holds another table (see diffcdc.state.owner)."""
    from diffcdc.state.owner import check_owner
    from diffcdc.state.store import TableState

    check_owner(TableState(state_root, table.state_name), table.name, table.schema_name)


def check_state_roots(config: Any, *, reload: frozenset[str] = frozenset(),
                      state_given: bool = True) -> None:
    """Refuse a state root that is most likely the wrong folder, before anything runs.

    A table without any state under the root whose landing folder already holds what diffcdc
    publishes (``_metadata.json``) was published from another state root: run from the wrong
    working directory, or without the ``--state`` it was published with. Processing it would
    be refused later by the landing checks with a hint to re-create the table — the wrong cure.
    Tables being re-created on purpose (``reload``) are not checked for that; a table whose
    state folder holds another table is refused (see :mod:`diffcdc.state.owner`).
    """
    from diffcdc.state.owner import check_owner
    from diffcdc.state.store import TableState

    root = config.state_root()
    for table in config.tables:
        state = TableState(root, table.state_name)
        try:
            if state.storage.list("log"):
                commits = state.commits()
                check_owner(state, table.name, table.schema_name, commits)
                if commits and table.name not in reload:
                    check_targets_moved(table, commits[-1].record, state_given)
                continue
            if (
                table.name in reload
                or state.requests.has_reload_request()
                or state.requests.has_drop_request()
            ):
                continue
        except DiffcdcError as exc:  # e.g. a remote state root that cannot be reached
            exc.table = exc.table or table.name
            raise
        published = _published_output(table)
        if published is None:
            continue
        where = (f"the state root {root}" if state_given else
                 f"the default state root ./state (here {root})")
        fix = ("check --state (or the config file's state)" if state_given else
               "run from the folder that holds the table's state, or give --state ROOT")
        raise UsageError(
            f"no state for this table under {where}, but its landing folder already holds "
            "diffcdc's output: it was published with another state root",
            table=table.name,
            path=published,
            hint=f"{fix}; only if that state is lost for good, re-create the table on purpose "
            "with 'diffcdc reload'",
        )


def check_targets_moved(table: Any, record: Any, state_given: bool) -> None:
    """Refuse a sink target other than the one the state published to, while that one still
    exists (each sink type's plug-in checks its own; see ``SinkPlugin.check_target``)."""
    from diffcdc.sinks.registry import plugin_of

    for sink in table.sinks:
        entry = record.sinks.get(sink.sink_id)
        if entry is not None:
            plugin_of(sink).check_target(sink, entry.manifest, table.sink_table(), state_given)


def _published_output(table: Any) -> str | None:
    """Where one of the table's sinks already holds diffcdc's output (``_metadata.json``)."""
    from diffcdc.sinks.registry import plugin_of

    for sink in table.sinks:
        found = plugin_of(sink).published_output(sink, table.sink_table())
        if found is not None:
            return found
    return None
