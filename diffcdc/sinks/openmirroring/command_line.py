"""The landing zone's options of ``diffcdc run`` (and ``plan``, ``reload``, ``rollback``): one
option group, so ``--help`` shows the sink's format flags apart from the run's own options.

Read back by the plug-in's ``TableLevel.from_args`` (:mod:`diffcdc.sinks.openmirroring.plugin`).
Imports nothing but argparse: ``diffcdc --help`` loads no config model.
"""

from __future__ import annotations

import argparse
import textwrap

#: The title of the group in ``--help``.
TITLE = "landing zone options (the table's Open Mirroring sink)"


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the landing zone's file and format options to a command, as one group."""
    group = parser.add_argument_group(TITLE, textwrap.fill(
        "How the landing files of a table given by --landing are written (a config file sets "
        "them per table, or per sink in [[tables.T.sinks]]).", 88))
    add = group.add_argument
    add("--codec", choices=["snappy", "zstd", "gzip", "none"],
        help="landing file codec (default: snappy for Parquet, none for text)")
    add("--max-rows-per-file", type=int, help="rows per landing file at most")
    add("--format", dest="file_format", choices=["parquet", "csv", "tsv", "psv", "text"],
        help="landing files: parquet (default) or delimited text")
    add("--file-extension", help="extension of text files (needed with --format text)")
    add("--row-separator", help="text: \\r\\n (default), \\n or \\r")
    add("--column-separator", help="text: one character (default from --format; \\t for tab)")
    add("--quote-char", dest="quote_character", help='text: quote character (default "), or ""')
    add("--escape-char", dest="escape_character", help="text: escape character (default \\), or ''")
    add("--null-value", help="text: how NULL is written (default: empty)")
    add("--encoding", help="text: character encoding (default UTF-8)")
    add("--upsert-default", action="store_true", default=None,
        help="_metadata.json isUpsertDefaultRowMarker: inserts and updates land as UPSERT (4)")
    add("--file-detection", choices=["sequential", "last_update_time"],
        help="last_update_time: fileDetectionStrategy LastUpdateTimeFileDetection")
    add("--partner-name", help="_partnerEvents.json partnerName (with --partner-source-type)")
    add("--partner-source-type", help="_partnerEvents.json sourceInfo.sourceType (SQL, Oracle...)")
    add("--partner-source-version", help="_partnerEvents.json sourceInfo.sourceVersion")
    add("--drop-timeout", type=float, help="seconds to wait for a dropped table folder to vanish")
