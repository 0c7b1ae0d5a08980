"""What the rest of diffcdc knows of a source type: one :class:`SourcePlugin` subclass per type,
registered in :mod:`diffcdc.sources.registry` (the config union, its error text, the config
file, the JDBC driver jars, the secrets checked before Spark starts, the source a run reads and
what ``status``, ``rollback`` and ``repair`` may ask of it read it).

Like a sink's (:mod:`diffcdc.sinks.plugin`), a plug-in is a class, never instantiated: class
attributes declare it, classmethods answer for it; the :class:`~diffcdc.sources.base.Source` a
run reads is what :meth:`SourcePlugin.build` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from diffcdc.sources.base import Source


class SourceTable(Protocol):
    """What a source knows of its table (a :class:`~diffcdc.config.TableConfig`)."""

    name: str
    source: Any
    csv_infer_schema: bool
    csv_encoding: str
    snapshot_time: str | None


@dataclass(frozen=True)
class SourceCapabilities:
    """What a source type can do beyond a run's read, as the commands ask it."""

    #: Its waiting snapshots are known without reading them (``status`` lists them).
    lists_waiting: bool = False
    #: A committed snapshot can be read again and proven the same by the identity its commit
    #: recorded (:meth:`~diffcdc.sources.base.Source.proven`; ``rollback``, ``repair``).
    reads_again: bool = False
    #: Modules whose code runs in Spark tasks on the executors when it reads (the executors'
    #: import check asks for them when a run's table uses the source type).
    executor_modules: tuple[str, ...] = ()
    #: The table's ``snapshot_time`` rule gives its snapshots' as-of times (a folder's: their
    #: mtime or their id); a table of a source type without it is refused one.
    snapshot_times: bool = False


class SourcePlugin:
    """One source type: its config and what the engine and the config need to know of it."""

    #: The tag of the table's ``source`` (``folder`` for a path, else the ``type`` of a table).
    type: ClassVar[str]
    #: The ``source`` setting's type: ``str`` for a folder, else a pydantic model.
    config: ClassVar[type[Any]]
    #: Whether a config file may name it (``dataframe``: handed over in Python only).
    in_file: ClassVar[bool] = True
    #: How a source not named in a config file (``in_file`` False) is handed over: named when a
    #: config file names it.
    run_with: ClassVar[str] = "diffcdc.run_dataframe"
    #: Fields of its config that hold local paths (relative ones: relative to the config file).
    path_fields: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[SourceCapabilities] = SourceCapabilities()

    if TYPE_CHECKING:  # every plug-in defines it

        @classmethod
        def build(cls, table: SourceTable) -> Source:
            """The source a run reads (its client code loads here)."""

    @classmethod
    def jars(cls, config: Any) -> tuple[str, ...]:
        """Driver jars it needs on Spark's class path."""
        return ()

    @classmethod
    def folder(cls, config: Any) -> str | None:
        """The folder it reads its snapshots from (None: none), kept apart from every sink's
        folder, the state root and other tables' sinks."""
        return None

    @classmethod
    def check_secrets(cls, config: Any, table: str) -> None:
        """Refuses (``ConfigError``) a secret it names that is not there."""
