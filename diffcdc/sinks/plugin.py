"""What the rest of diffcdc knows of a sink type: one :class:`SinkPlugin` subclass, declared in
the sink's own package (``plugin.py``) and registered with :func:`diffcdc.sinks.registry.register_sink`
(the built-in ones by module path, loaded when a config or a state names their type).

A plug-in is a class, never instantiated: class attributes declare what the sink is (its
config model, the libraries it needs and the extra that installs them, the modules its Spark
tasks run, its capabilities) and classmethods answer for it (build the sink object, what a
manifest adds to a run's result and to ``status``, what ``diffcdc drop`` deletes, the checks
of its target made before Spark starts). The sink object a run uses is the
:class:`~diffcdc.sinks.base.Sink` that :meth:`SinkPlugin.build` returns, as a dlt destination
factory gives its client. The config union, the config file, the error texts, ``status``,
``diffcdc drop``, the executors' import check and the state-root checks read a sink's
plug-in; none of them names a sink type.

Importing a plug-in is cheap: no Spark, no client library (those load in :meth:`build`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from diffcdc.extras import Extra
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.observe.naming import DatasetName
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState

#: Progress messages of a command (``diffcdc drop``).
Say = Callable[[str], None]


@dataclass(frozen=True)
class ResultFiles:
    """What one sink's manifest adds to a snapshot's result: the files it publishes (names) and
    the sequence number of the first (the run's ``files`` and ``first_sequence``)."""

    files: tuple[str, ...] = ()
    first_sequence: int | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a sink type can do, as the engine and the commands ask it."""

    #: ``diffcdc drop`` deletes its output (:meth:`SinkPlugin.drop`); without, the target
    #: stays and the next run gives it a full image, as to a sink added to a table.
    drop: bool = False
    #: Its target can be found holding diffcdc's output for a table without state
    #: (:meth:`SinkPlugin.published_output`) and checked against the last commit's
    #: (:meth:`SinkPlugin.check_target`) before Spark starts.
    target_checks: bool = False
    #: Modules whose code runs in Spark tasks on the executors (the import check asks for them).
    executor_modules: tuple[str, ...] = ()
    #: Its ``path_fields`` are written through diffcdc's own byte store (:mod:`diffcdc.storage`),
    #: so one on ADLS Gen2 / OneLake needs the ``adls`` extra (delta-rs reaches stores itself).
    byte_store: bool = False


class SinkPlugin:
    """One sink type. Subclass it in the sink's package, set ``type``, ``config`` (and what else
    applies) and override :meth:`build`; the other classmethods have the neutral answer."""

    #: The ``type`` of a ``[[tables.T.sinks]]`` entry (the config model's ``type`` literal).
    type: ClassVar[str]
    #: The config model of one such entry (pydantic, ``type`` its discriminator).
    config: ClassVar[type[BaseModel]]
    #: The pip extra that installs the client library the sink needs beyond diffcdc's own
    #: (``pip install diffcdc[<name>]``, the modules to find: :class:`~diffcdc.extras.Extra`;
    #: None: none needed). A config naming the sink is refused at load when it is missing.
    extra: ClassVar[Extra | None] = None
    #: Fields of the entry that hold local paths (relative ones: relative to the config file).
    path_fields: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capabilities] = Capabilities()

    if TYPE_CHECKING:  # every plug-in defines it (register_sink refuses one without)

        @classmethod
        def build(cls, config: Any, table: SinkTable, state: TableState) -> Sink:
            """The sink object of one configured sink of a table (its client library loads
            here)."""

    @classmethod
    def check_secrets(cls, config: Any, table: str) -> None:
        """Refuse (``ConfigError``) a secret the entry names that is not there."""

    @classmethod
    def result(cls, manifest: Mapping[str, Any]) -> ResultFiles:
        """What a manifest adds to the snapshot's result."""
        return ResultFiles()

    @classmethod
    def status(cls, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """``status``'s fields of the sink after ``rows``, from its manifest (``target`` first)."""
        return {"target": manifest.get("target")}

    @classmethod
    def lineage_dataset(cls, config: Any, table: SinkTable) -> DatasetName | None:
        """The sink's output as an OpenLineage dataset (its namespace and name, per the
        naming conventions); by default its table folder or topic from :meth:`targets`
        (:func:`diffcdc.observe.naming.targets_dataset`); None: not named (no output dataset)."""
        from diffcdc.observe.naming import targets_dataset

        return targets_dataset(config.targets(table.name, table.schema_name))

    @classmethod
    def drop_target(cls, config: Any, table: SinkTable) -> str | None:
        """What ``diffcdc drop`` deletes of the sink's output, as its confirmation names it
        (asked when ``capabilities.drop``)."""
        return None

    @classmethod
    def drop(cls, config: Any, table: SinkTable, say: Say) -> str | None:
        """Deletes that output (under the table's lease); returns where it was (None: nothing)."""
        return None

    @classmethod
    def published_output(cls, config: Any, table: SinkTable) -> str | None:
        """Where the target already holds diffcdc's output, for a table without state
        (published from another state root), or None (asked when ``capabilities.target_checks``)."""
        return None

    @classmethod
    def check_target(cls, config: Any, manifest: Mapping[str, Any], table: SinkTable,
                     state_given: bool) -> None:
        """Refuse (``UsageError``) a target other than the one the manifest of the table's last
        commit published to, while that one still exists (``state_given``: ``--state`` was
        given); asked when ``capabilities.target_checks``."""
