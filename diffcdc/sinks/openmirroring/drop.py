"""Dropping a table on purpose (``diffcdc drop``); re-creating is a run with ``reload``.

A drop deletes the table folder from the landing zone (the mirroring service then drops the
mirrored table), waits until the folder is really gone, and forgets the table's state so the
next run starts with a fresh initial load. The intent is recorded in the state first: a drop
that dies half-way is finished by running it again, and a ``run`` refuses the table meanwhile.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable

from diffcdc.config import TableConfig
from diffcdc.sinks.openmirroring.contract import table_folder
from diffcdc.sinks.storage.base import open_landing
from diffcdc.state.store import TableState, now_iso, write_json_replace


def drop_table(
    table: TableConfig, state_root: str, say: Callable[[str], None] | None = None
) -> str:
    """Drop ``table`` from its landing zone and state; returns the dropped folder's path."""
    say = say or (lambda message: None)
    state = TableState(state_root, table.state_name)
    folder = table_folder(table.name, table.schema_name)
    with state.lock():
        write_json_replace(state.drop_path, {"requested_at": now_iso(), "folder": folder})
        storage = open_landing(table.landing, **table.landing_options)
        try:
            where = f"{storage.describe()}/{folder}"
            say(f"deleting {where} and waiting until it is gone")
            storage.drop_folder(folder, table.drop_timeout)
        finally:
            storage.close()
        # Forget the state in one rename (the name starts with '.', so status skips it).
        graveyard = os.path.join(state.root, f".dropped-{table.state_name}-{uuid.uuid4().hex[:8]}")
        os.rename(state.dir, graveyard)
    shutil.rmtree(graveyard, ignore_errors=True)
    say(f"dropped; the next run publishes a fresh initial load into {where}")
    return where
