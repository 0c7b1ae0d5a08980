"""The command line's settings, validated by the very models that validate a config file.

``--keep-versions -5`` is refused like ``keep_versions = -5``; every problem is named by the
option that gave it (``option --max-delete-ratio: ...``), all of them on one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from diffcdc.config import RunConfig, TableConfig
from diffcdc.config_errors import describe_error
from diffcdc.errors import ConfigError, UsageError
from diffcdc.extras_check import check_config
from diffcdc.sinks.openmirroring.shorthand import TABLE_LEVEL
from diffcdc.state.root import is_url

#: Settings whose command-line option has another name (``--`` and dashes added otherwise).
_OPTION_NAMES = {
    "name": "table",
    "schema_name": "schema",
    "spark.master": "master",
    "spark.remote": "remote",
    "spark.connect_timeout": "connect-timeout",
    **TABLE_LEVEL.option_names,
}
#: Nested settings whose fields are options of their own (``--max-delete-ratio``).
_OPTION_GROUPS = [["quality"], *([g] for g in TABLE_LEVEL.option_groups)]


def option_name(loc: Sequence[Any]) -> str:
    """``--max-delete-ratio`` for the location of a validation error in a one-table config."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["tables"]:
        parts = parts[2:] if len(parts) > 1 and parts[1].isdigit() else parts[1:]
    if parts[:1] == ["sinks"]:  # the landing options of the command line's one sink
        parts = parts[2:] if len(parts) > 1 and parts[1].isdigit() else parts[1:]
        parts = parts[1:] if parts[:1] == [TABLE_LEVEL.type] else parts
    if parts[:1] in _OPTION_GROUPS:
        parts = parts[1:]
    field = ".".join(parts)
    if not field:
        return "the options"
    return "option --" + _OPTION_NAMES.get(field, field).replace("_", "-")


def options_error(exc: ValidationError, table: Any = None) -> ConfigError:
    """Every problem of the command line's settings, each named by its option, on one line."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    problems = [f"{option_name(e['loc'])}: {describe_error(e)}" for e in errors]
    return ConfigError(
        "; ".join(dict.fromkeys(problems)),
        table=table if isinstance(table, str) else None,
    )


def url_data(state_data: str | None) -> str | None:
    """``state_data`` when it is a URL (a local state root keeps such a data folder), else
    None (a local folder for a URL root's data: a local state root holds its data itself)."""
    from diffcdc.storage import paths

    return state_data if state_data and paths.is_url(state_data) else None


def _given(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def table_from_options(**fields: Any) -> TableConfig:
    """A TableConfig from command-line options (None: not given, the default applies)."""
    try:
        return TableConfig(**_given(fields))
    except ValidationError as exc:
        raise options_error(exc, fields.get("name")) from None


def run_config_from_options(table: dict[str, Any], **settings: Any) -> RunConfig:
    """The RunConfig of a command-line run of one table: its fields and the run's settings
    (``state``, ``keep_versions``, ``parallelism``, ``spark``) validated together."""
    try:
        return RunConfig(tables=[_given(table)], **_spark(None, _given(settings)))
    except ValidationError as exc:
        raise options_error(exc, table.get("name")) from None


def apply_options(config: RunConfig, **settings: Any) -> RunConfig:
    """``config`` (from a file) with the settings given on the command line, validated like the
    file's own (None: not given)."""
    given = _given(settings)
    if "state" in given and not is_url(given["state"]):
        # A local --state holds its own data unless that is at a URL; the file's URL
        # settings are not for it.
        data = url_data(config.state_data)
        given = {**given, "state_data": data, "state_options": {}}
    try:
        return RunConfig.model_validate({**dict(config), **_spark(config, given)})
    except ValidationError as exc:
        raise options_error(exc) from None


def _spark(config: RunConfig | None, settings: dict[str, Any]) -> dict[str, Any]:
    """``master`` and ``remote`` given on the command line go into the ``spark`` settings (one
    of them replaces the file's choice of both)."""
    given = {k: settings[k] for k in ("master", "remote") if k in settings}
    timeout = {k: settings[k] for k in ("connect_timeout",) if k in settings}
    if not given and not timeout:
        return settings
    rest = {k: v for k, v in settings.items() if k not in given and k not in timeout}
    spark = config.spark.model_dump() if config is not None else {}
    chosen = {"master": None, "remote": None, **given} if given else {}
    return {**rest, "spark": {**spark, **chosen, **timeout}}


def run_config_from_args(args: Any) -> RunConfig:
    """The run's settings from ``diffcdc run``'s options: a config file and the options that
    change it, or one table given by options; validated by the config models either way."""
    from diffcdc.config_file import load_config

    TABLE_LEVEL.check_args(args)
    settings = {"state": args.state, "keep_versions": args.keep_versions,
                "parallelism": args.parallelism, "master": args.master, "remote": args.remote,
                "connect_timeout": getattr(args, "connect_timeout", None)}
    if args.config:
        flags = [n for n in ("source", "keys", "table", "landing") if getattr(args, n)]
        if flags:
            raise UsageError(f"--config cannot be combined with --{', --'.join(flags)}")
        if args.only is not None and not args.only:  # --only "$TABLES" with an empty variable
            raise UsageError("--only names no table", path=args.config,
                             hint="give table names, comma-separated; without --only every "
                             "table of the config runs")
        ignored = table_options_given(args)
        if ignored:  # they set the one table given by options: never silently unused
            raise UsageError(
                f"--config cannot be combined with {', '.join(ignored)}: "
                f"{'it sets' if len(ignored) == 1 else 'they set'} the one table given by "
                "--source, --keys, --table and --landing",
                hint=f"set {'it' if len(ignored) == 1 else 'them'} in the config file (the "
                "table's fields, its quality, its sink's entry), or give the table by options "
                "instead of --config")
        config = apply_options(load_config(args.config), **settings)
        if args.only:
            unknown = set(args.only) - {t.name for t in config.tables}
            if unknown:
                option = getattr(args, "only_option", "--only")  # reload/rollback: --table
                raise UsageError(f"{option} names unknown table(s) {sorted(unknown)}",
                                 path=args.config, hint="tables of the config: "
                                 + ", ".join(t.name for t in config.tables))
            args.config_tables = list(config.tables)  # the metrics file keeps them all
            config.tables = [t for t in config.tables if t.name in args.only]
    else:
        missing = [n for n in ("source", "keys", "table", "landing") if not getattr(args, n)]
        if missing:
            raise UsageError(
                f"missing --{', --'.join(missing)}", hint="give them, or use --config FILE"
            )
        config = run_config_from_options(table_fields(args), **settings)
    if args.landing_options:
        given = dict(args.landing_options)
        config.tables = [t.with_table_fields(landing_options=given) for t in config.tables]
    check_config(config)  # with the options: a sink's or the gate's library missing, its extra
    return config


def table_options_given(args: Any) -> list[str]:
    """The table options (``--max-delete-ratio``, ``--exclude``, ``--codec`` ...) given on the
    command line, by name, besides the four that name the table (``--source`` ...)."""
    given: list[str] = []
    for field, value in table_fields(args).items():
        if field in ("name", "source", "keys", "landing") or value is None:
            continue
        if isinstance(value, dict):
            given += [option_name([field, inner]) for inner, v in value.items()
                      if v is not None and v != ""]
        else:
            given.append(option_name([field]))
    return [option.removeprefix("option ") for option in dict.fromkeys(given)]


def table_fields(args: Any) -> dict[str, Any]:
    """TableConfig fields from ``diffcdc run``'s table options (None: not given)."""
    quality = {
        "expectation_suite": args.expectation_suite,
        "max_delete_ratio": args.max_delete_ratio,
        "min_row_ratio": args.min_row_ratio,
        "max_row_ratio": args.max_row_ratio,
        "min_rows_for_ratios": args.min_rows_for_ratios,
    }
    return {
        "name": args.table,
        "source": args.source,
        "keys": args.keys,
        "exclude": args.exclude,
        "schema_name": args.schema_name,
        "fingerprint_bits": args.fingerprint_bits,
        "csv_infer_schema": args.csv_infer_schema,
        "csv_encoding": args.csv_encoding,
        "quality": _given(quality) or None,
        "schema_policy": args.schema_policy,
        "removed_columns": args.removed_columns,
        **TABLE_LEVEL.from_args(args),
    }
