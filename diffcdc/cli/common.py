"""What several commands share: finding a table in a config, refusing secrets on URLs."""

from __future__ import annotations

from typing import Any

from diffcdc.errors import DiffcdcError, UsageError


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


def url_data(state_data: str | None) -> str | None:
    """``state_data`` when it is a URL (a local state root keeps such a data folder), else
    None (a local folder for a URL root's data: a local state root holds its data itself)."""
    from diffcdc.storage import paths

    return state_data if state_data and paths.is_url(state_data) else None


def located_table(args: Any, command: str) -> tuple[Any, Any]:
    """The table a command names (from ``--config``, or only its location from ``--landing``)
    and the state root; ``--landing`` overrides a configured landing root, and
    ``--landing-option`` values are added to the table's landing zones."""
    from diffcdc.config import table_from_args
    from diffcdc.config_file import load_config

    check_landing_arg(args.landing)
    config = None
    if args.config:
        config = load_config(args.config)
        table = config_table(config, args.table, args.config)
        if args.landing:
            table = table.with_landing(landing=args.landing)
    elif args.landing:
        # Only the location matters here; source and keys are placeholders.
        table = table_from_args(name=args.table, source=".", keys=["-"], landing=args.landing,
                                schema_name=args.schema_name)
    else:
        raise UsageError(f"{command} needs --landing or --config", hint="give one of them")
    if args.landing_options:
        table = table.with_landing_options(dict(args.landing_options))
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
                    check_landing_moved(table, commits[-1].record, state_given)
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


def check_landing_moved(table: Any, record: Any, state_given: bool) -> None:
    """Refuse a local landing root other than the one the state published to, while that one
    still exists: a wrong ``--landing`` (or the state root of another landing zone) would
    otherwise continue the table's numbering in a folder that never had its first files."""
    import os

    for sink in table.landing_sinks():
        entry = record.sinks.get(sink.sink_id)
        published = entry.manifest.get("landing") if entry is not None else None
        if not isinstance(published, str) or not os.path.isabs(published) or "://" in sink.landing:
            continue
        if not os.path.isdir(published) or os.path.abspath(sink.landing) == published:
            continue
        if os.path.isdir(sink.landing) and os.path.samefile(sink.landing, published):
            continue
        state_fix = "check --state (or the config file's state)" if state_given else \
            "give --state ROOT (default ./state, relative to the working directory)"
        raise UsageError(
            f"its state says it was published to the landing root {published}, not "
            f"{os.path.abspath(sink.landing)}",
            table=table.name,
            hint=f"give the landing root it was published to (--landing or the config file); "
            f"if this landing root is right, the state is another one's: {state_fix}",
        )


def _published_output(table: Any) -> str | None:
    """Where one of the table's Open Mirroring sinks already holds ``_metadata.json``."""
    from diffcdc.sinks.openmirroring.contract import table_folder
    from diffcdc.sinks.openmirroring.landing import open_landing
    from diffcdc.sinks.openmirroring.metadata import METADATA_FILE
    from diffcdc.storage.base import join

    for sink in table.landing_sinks():
        try:
            storage = open_landing(sink.landing, **sink.landing_options)
            try:
                target = join(table_folder(table.name, table.schema_name), METADATA_FILE)
                if storage.stat(target) is not None:
                    return f"{storage.describe()}/{target}"
            finally:
                storage.close()
        except (DiffcdcError, OSError):  # unreachable or refused: the table's run reports it
            continue
    return None
