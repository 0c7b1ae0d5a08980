"""Dropping a table's landing folder on purpose (``diffcdc drop``, see :mod:`diffcdc.engine.drop`).

The table folder is deleted from the landing zone (the mirroring service then drops the
mirrored table) and the drop waits until the folder is really gone.
"""

from __future__ import annotations

from collections.abc import Callable

from diffcdc.sinks.openmirroring import landing
from diffcdc.sinks.openmirroring.config import OpenMirroringSinkConfig
from diffcdc.sinks.openmirroring.contract import table_folder
from diffcdc.sinks.table import SinkTable


def drop_target(config: OpenMirroringSinkConfig, table: SinkTable) -> str:
    """The table folder a drop deletes, as the landing root was given."""
    return f"{config.landing}/{table_folder(table.name, table.schema_name)}"


def drop_folder(config: OpenMirroringSinkConfig, table: SinkTable, say: Callable[[str], None]) -> str:
    """Delete the table's folder and wait until it is gone; returns where it was."""
    folder = table_folder(table.name, table.schema_name)
    storage = landing.open_landing(config.landing, **config.landing_options)
    try:
        where = f"{storage.describe()}/{folder}"
        say(f"deleting {where} and waiting until it is gone")
        landing.drop_folder(storage, folder, config.drop_timeout)
        return where
    finally:
        storage.close()
