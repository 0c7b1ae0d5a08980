"""The Open Mirroring landing-zone sink as the rest of diffcdc sees it (see
:mod:`diffcdc.sinks.plugin`): a table's landing fields at table level (the single-table command
line, a config file's ``landing`` and ``[partner]``), its files in a run's result and its next
sequence number in ``status``, its table folder dropped by ``diffcdc drop``, and the checks that
a landing root is the one the state published to.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from diffcdc.errors import DiffcdcError, UsageError
from diffcdc.sinks.openmirroring.config import LANDING_FIELDS, OpenMirroringSinkConfig
from diffcdc.sinks.plugin import Headline, ResultFiles, SinkPlugin, TableLevel
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


def _build(config: OpenMirroringSinkConfig, table: SinkTable, state: TableState) -> Sink:
    from diffcdc.sinks.openmirroring.sink import OpenMirroringSink

    return OpenMirroringSink(config.sink_id, table, config, state.sink_marks(config.sink_id))


def _override(config: OpenMirroringSinkConfig, fields: Mapping[str, Any]) -> OpenMirroringSinkConfig:
    """``--landing`` replaces the landing root; ``--landing-option`` values are added."""
    given = dict(fields)
    if "landing_options" in given:
        given["landing_options"] = {**config.landing_options, **given["landing_options"]}
    return OpenMirroringSinkConfig.model_validate({**config.model_dump(), **given})


def _from_args(args: Any) -> dict[str, Any]:
    """The landing fields of ``diffcdc run``'s single-table options (None: not given)."""
    text = {
        k: getattr(args, k)
        for k in ("row_separator", "column_separator", "quote_character", "escape_character",
                  "null_value", "encoding")
        if getattr(args, k, None) is not None
    }
    partner = None
    if args.partner_name or args.partner_source_type:
        partner = {"partner_name": args.partner_name or "",
                   "source_type": args.partner_source_type or "",
                   "source_version": args.partner_source_version}
    return {
        "landing": args.landing,
        "codec": args.codec,
        "max_rows_per_file": args.max_rows_per_file,
        "file_format": args.file_format,
        "file_extension": args.file_extension,
        "text": text or None,
        "upsert_default": args.upsert_default,
        "file_detection": args.file_detection,
        "partner": partner,
        "drop_timeout": args.drop_timeout,
    }


def _check_args(args: Any) -> None:
    """Refuse a SAS token on a ``--landing`` URL (it would show in process lists)."""
    landing = args.landing
    if landing and "://" in landing and "?" in landing:
        raise UsageError(
            "--landing must not carry a query string (a SAS token is a secret)",
            hint="export AZURE_STORAGE_SAS_TOKEN, or use sas_token / sas_token_env in the "
            "config file's landing_options",
        )


def _result(manifest: Mapping[str, Any]) -> ResultFiles:
    files = tuple(f["name"] for f in manifest.get("files") or [])
    return ResultFiles(files, manifest["sequence"]["first"] if files else None)


def _status(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {"target": manifest.get("landing"),
            "next_sequence": (manifest.get("sequence") or {}).get("next")}


def _headline(item: Mapping[str, Any]) -> Headline:
    return Headline(item["target"], item["next_sequence"])


def _drop_target(config: OpenMirroringSinkConfig, table: SinkTable) -> str:
    from diffcdc.sinks.openmirroring.drop import drop_target

    return drop_target(config, table)


def _drop(config: OpenMirroringSinkConfig, table: SinkTable, say: Callable[[str], None]) -> str:
    from diffcdc.sinks.openmirroring.drop import drop_folder

    return drop_folder(config, table, say)


def _published_output(config: OpenMirroringSinkConfig, table: SinkTable) -> str | None:
    """Where the table's folder already holds ``_metadata.json``."""
    from diffcdc.sinks.openmirroring.contract import table_folder
    from diffcdc.sinks.openmirroring.landing import open_landing
    from diffcdc.sinks.openmirroring.metadata import METADATA_FILE
    from diffcdc.storage.base import join

    try:
        storage = open_landing(config.landing, **config.landing_options)
        try:
            target = join(table_folder(table.name, table.schema_name), METADATA_FILE)
            if storage.stat(target) is not None:
                return f"{storage.describe()}/{target}"
        finally:
            storage.close()
    except (DiffcdcError, OSError):  # unreachable or refused: the table's run reports it
        return None
    return None


def _check_target(config: OpenMirroringSinkConfig, manifest: Mapping[str, Any], table: SinkTable,
                  state_given: bool) -> None:
    """Refuse a local landing root other than the one the state published to, while that one
    still exists: a wrong ``--landing`` (or the state root of another landing zone) would
    otherwise continue the table's numbering in a folder that never had its first files."""
    published = manifest.get("landing")
    if not isinstance(published, str) or not os.path.isabs(published) or "://" in config.landing:
        return
    if not os.path.isdir(published) or os.path.abspath(config.landing) == published:
        return
    if os.path.isdir(config.landing) and os.path.samefile(config.landing, published):
        return
    state_fix = "check --state (or the config file's state)" if state_given else \
        "give --state ROOT (default ./state, relative to the working directory)"
    raise UsageError(
        f"its state says it was published to the landing root {published}, not "
        f"{os.path.abspath(config.landing)}",
        table=table.name,
        hint=f"give the landing root it was published to (--landing or the config file); "
        f"if this landing root is right, the state is another one's: {state_fix}",
    )


PLUGIN: SinkPlugin[OpenMirroringSinkConfig] = SinkPlugin(
    type="open_mirroring",
    config=OpenMirroringSinkConfig,
    build=_build,
    executor_modules=("diffcdc.sinks.openmirroring.staging",),
    path_fields=("landing",),
    table_level=TableLevel(
        fields=LANDING_FIELDS,
        global_fields=("landing",),
        sections=("partner",),
        from_args=_from_args,
        check_args=_check_args,
        option_names={
            "file_format": "format",
            "quote_character": "quote-char",
            "escape_character": "escape-char",
            "landing_options": "landing-option",
            "partner.partner_name": "partner-name",
            "partner.source_type": "partner-source-type",
            "partner.source_version": "partner-source-version",
        },
        option_groups=("text",),
        override=_override,
    ),
    result=_result,
    status=_status,
    headline=_headline,
    drop_target=_drop_target,
    drop=_drop,
    published_output=_published_output,
    check_target=_check_target,
)
