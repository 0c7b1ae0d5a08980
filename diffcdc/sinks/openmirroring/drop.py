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
from diffcdc.sinks.openmirroring.landing import drop_folder, open_landing
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState


def drop_table(
    table: TableConfig, state_root: StateRoot | str, say: Callable[[str], None] | None = None
) -> str:
    """Drop ``table`` from its landing zones and state; returns the dropped folders' paths.

    Other sinks' targets are left as they are (a Delta table or a Kafka topic is data of its
    own): the next run gives them a full image, as to a sink added to a table.
    """
    say = say or (lambda message: None)
    state = TableState(state_root, table.state_name)
    folder = table_folder(table.name, table.schema_name)
    places = []
    with state.lock():
        state.requests.request_drop(folder)
        for sink in table.landing_sinks():
            storage = open_landing(sink.landing, **sink.landing_options)
            try:
                where = f"{storage.describe()}/{folder}"
                say(f"deleting {where} and waiting until it is gone")
                drop_folder(storage, folder, sink.drop_timeout)
                places.append(where)
            finally:
                storage.close()
        graveyard = None
        if not state.location.remote and state.location.data == state.location.location:
            # Forget the state in one rename (the name starts with '.', so status skips it).
            graveyard = os.path.join(state.root, f".dropped-{table.state_name}-{uuid.uuid4().hex[:8]}")
            os.rename(state.dir, graveyard)
    if graveyard is not None:
        shutil.rmtree(graveyard, ignore_errors=True)
    else:
        # A URL state root or data folder: the data, then the documents (the drop request goes last, so a
        # drop killed half-way is still refused by runs and finished by the next drop).
        state.forget()
    where = ", ".join(places) or "(no landing zone)"
    say(f"dropped; the next run publishes a fresh initial load into {where}")
    return where
