"""What the rest of diffcdc knows of a sink type: one :class:`SinkPlugin`, declared in the sink's
own package (``plugin.py``) and listed in :mod:`diffcdc.sinks.registry`.

The config union, the config file's and command line's table-level fields, the error texts,
``status``, ``diffcdc drop``, the executors' import check and the state-root checks read a
sink's plug-in; none of them names a sink type. A new sink is one folder (its config model, its
:class:`~diffcdc.sinks.base.Sink`, its ``plugin.py``) plus its line in the registry.

Importing a plug-in is cheap: no Spark, no client library; the sink itself is imported when
:attr:`SinkPlugin.build` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState

C = TypeVar("C", bound=BaseModel)
#: Progress messages of a command (``diffcdc drop``).
Say = Callable[[str], None]


@dataclass(frozen=True)
class ResultFiles:
    """What one sink's manifest adds to a snapshot's result: the files it publishes (names) and
    the sequence number of the first (the run's ``files`` and ``first_sequence``)."""

    files: tuple[str, ...] = ()
    first_sequence: int | None = None


@dataclass(frozen=True)
class Headline:
    """``status``'s table-level ``landing`` and ``next_sequence`` (the view of a table with one
    landing zone, from before sinks existed), from the table's first sink that gives them."""

    landing: str | None
    next_sequence: int | None


def _no_files(manifest: Mapping[str, Any]) -> ResultFiles:
    return ResultFiles()


def _target(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {"target": manifest.get("target")}


def _no_headline(item: Mapping[str, Any]) -> Headline | None:
    return None


def _keeps_target(config: Any, table: SinkTable) -> str | None:
    return None


def _kept(config: Any, table: SinkTable, say: Say) -> str | None:
    return None


def _not_published(config: Any, table: SinkTable) -> str | None:
    return None


def _no_check(config: Any, manifest: Mapping[str, Any], table: SinkTable, state_given: bool) -> None:
    return None


def _no_secrets(config: Any, table: str) -> None:
    return None


@dataclass(frozen=True)
class TableLevel(Generic[C]):
    """A sink type configured by fields at table level, as the one landing zone of a table was
    before sinks existed: a table without ``sinks`` gets one sink of this type from them; with
    ``sinks``, they are defaults of its sinks of this type. The single-table command line
    (``diffcdc run --landing ... --codec ...``) and a config file's ``[defaults]`` give them."""

    #: The fields (the config model's, but ``type`` and ``name``).
    fields: tuple[str, ...]
    #: The fields the command line's options give (None: not given), from its parsed arguments.
    from_args: Callable[[Any], dict[str, Any]]
    #: Refuses (``UsageError``) a value of those options that must not be given on a command
    #: line (a secret: it would show in process lists).
    check_args: Callable[[Any], None]
    #: A copy of a sink's entry with fields given on the command line (``--landing``,
    #: ``--landing-option``), validated.
    override: Callable[[C, Mapping[str, Any]], C]
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


@dataclass(frozen=True)
class SinkPlugin(Generic[C]):
    """One sink type: its config model and everything the engine, the config and the commands
    need to know of it. Only ``type``, ``config`` and ``build`` are required."""

    #: The ``type`` of a ``[[tables.T.sinks]]`` entry (the config model's ``type`` literal).
    type: str
    #: The config model of one such entry (pydantic, ``type`` its discriminator).
    config: type[C]
    #: The sink object of one configured sink of a table (its client library loads here).
    build: Callable[[C, SinkTable, TableState], Sink]
    #: Modules whose code runs in Spark tasks on the executors (the import check asks for them).
    executor_modules: tuple[str, ...] = ()
    #: Fields of the entry that hold local paths (relative ones: relative to the config file).
    path_fields: tuple[str, ...] = ()
    #: How a table configures this sink type at table level (None: only as an entry of ``sinks``).
    table_level: TableLevel[C] | None = None
    #: Refuses (``ConfigError``) a secret the entry names that is not there (table name given).
    check_secrets: Callable[[C, str], None] = _no_secrets
    #: What a manifest adds to the snapshot's result.
    result: Callable[[Mapping[str, Any]], ResultFiles] = _no_files
    #: ``status``'s fields of the sink after ``rows``, from its manifest (``target`` first).
    status: Callable[[Mapping[str, Any]], dict[str, Any]] = _target
    #: ``status``'s table-level headline from the sink's status item (None: it gives none).
    headline: Callable[[Mapping[str, Any]], Headline | None] = _no_headline
    #: What ``diffcdc drop`` deletes of the sink's output, as its confirmation names it (None:
    #: the target stays; the next run gives it a full image, as to a sink added to a table).
    drop_target: Callable[[C, SinkTable], str | None] = _keeps_target
    #: Deletes that output (under the table's lease); returns where it was (None: nothing).
    drop: Callable[[C, SinkTable, Say], str | None] = _kept
    #: Where the target already holds diffcdc's output, for a table without state (published
    #: from another state root), or None.
    published_output: Callable[[C, SinkTable], str | None] = _not_published
    #: Refuses (``UsageError``) a target other than the one the manifest of the table's last
    #: commit published to, while that one still exists (``state_given``: ``--state`` was given).
    check_target: Callable[[C, Mapping[str, Any], SinkTable, bool], None] = _no_check
