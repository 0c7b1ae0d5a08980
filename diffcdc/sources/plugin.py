"""What the rest of diffcdc knows of a source type: one :class:`SourcePlugin` per type, listed
in :mod:`diffcdc.sources.registry` (the config union, its error text, the config file, the JDBC
driver jars, the secrets checked before Spark starts and the source a run reads read it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from diffcdc.sources.base import Source


class SourceTable(Protocol):
    """What a source knows of its table (a :class:`~diffcdc.config.TableConfig`)."""

    name: str
    source: Any
    csv_infer_schema: bool
    csv_encoding: str
    snapshot_time: str | None


def _no_jars(config: Any) -> tuple[str, ...]:
    return ()


def _no_secrets(config: Any, table: str) -> None:
    return None


@dataclass(frozen=True)
class SourcePlugin:
    """One source type: its config and what the engine and the config need to know of it."""

    #: The tag of the table's ``source`` (``folder`` for a path, else the ``type`` of a table).
    type: str
    #: The ``source`` setting's type: ``str`` for a folder, else a pydantic model.
    config: type[Any]
    #: The source a run reads (its client code loads here).
    build: Callable[[SourceTable], Source]
    #: Whether a config file may name it (``dataframe``: handed over in Python only).
    in_file: bool = True
    #: Driver jars it needs on Spark's class path.
    jars: Callable[[Any], tuple[str, ...]] = _no_jars
    #: Refuses (``ConfigError``) a secret it names that is not there (table name given).
    check_secrets: Callable[[Any, str], None] = _no_secrets
