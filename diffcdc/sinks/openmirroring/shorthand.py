"""Open Mirroring's table-level shorthand: a table configured as before sinks existed, with one
landing zone given by fields at table level (``landing``, ``codec``, ``file_format`` ...).

A table without ``sinks`` gets one ``open_mirroring`` sink from them; with ``sinks``, they are
defaults of its ``open_mirroring`` sinks. The single-table command line (``diffcdc run
--landing ... --codec ...``), a config file's ``landing`` and ``[partner]`` and ``[defaults]``
give them, and ``status`` shows the table's ``landing`` and ``next_sequence`` (its
:class:`Headline`). The config, the config file and the command line read :data:`TABLE_LEVEL`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diffcdc.errors import UsageError
from diffcdc.sinks.openmirroring.config import LANDING_FIELDS, OpenMirroringSinkConfig


@dataclass(frozen=True)
class Headline:
    """``status``'s table-level ``landing`` and ``next_sequence`` (the view of a table with one
    landing zone, from before sinks existed), from the table's first sink that gives them."""

    landing: str | None
    next_sequence: int | None


@dataclass(frozen=True)
class TableLevel:
    """How the shorthand's fields are given and applied."""

    #: The sink type they configure.
    type: str
    #: Its config model.
    config: type[OpenMirroringSinkConfig]
    #: The fields (the config model's, but ``type`` and ``name``).
    fields: tuple[str, ...]
    #: The fields the command line's options give (None: not given), from its parsed arguments.
    from_args: Callable[[Any], dict[str, Any]]
    #: Refuses (``UsageError``) a value of those options that must not be given on a command
    #: line (a secret: it would show in process lists).
    check_args: Callable[[Any], None]
    #: A copy of a sink's entry with fields given on the command line (``--landing``,
    #: ``--landing-option``), validated.
    override: Callable[[OpenMirroringSinkConfig, Mapping[str, Any]], OpenMirroringSinkConfig]
    #: Its fields that hold local paths (relative ones: relative to the config file).
    path_fields: tuple[str, ...] = ()
    #: ``[diffcdc]`` settings of a config file that are defaults of the field of the same name
    #: (``landing``).
    global_fields: tuple[str, ...] = ()
    #: Config file sections that are defaults of the field of the same name (``[partner]``).
    sections: tuple[str, ...] = ()
    #: Fields (dotted) whose command-line option is not the field's name with dashes
    #: (``file_format``: ``format``), for naming an option in an error.
    option_names: Mapping[str, str] = field(default_factory=dict)
    #: Nested fields whose own fields are options (``text``: ``--quote-char`` ...).
    option_groups: tuple[str, ...] = ()


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


TABLE_LEVEL = TableLevel(
    type="open_mirroring",
    config=OpenMirroringSinkConfig,
    fields=LANDING_FIELDS,
    path_fields=("landing",),
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
)


def headline(items: Sequence[Mapping[str, Any]]) -> Headline | None:
    """``status``'s table-level headline: from the first of a table's sink items (``status``'s,
    with ``type``, ``target`` and ``next_sequence``) that is an Open Mirroring sink's."""
    for item in items:
        if item["type"] == TABLE_LEVEL.type:
            return Headline(item["target"], item["next_sequence"])
    return None
