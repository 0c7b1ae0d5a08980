"""Dropping a table on purpose (``diffcdc drop``); re-creating is a run with ``reload``.

A drop asks each of the table's sinks to drop its output (an Open Mirroring sink deletes the
table folder from the landing zone, and the mirroring service then drops the mirrored table;
a Delta table or a Kafka topic is data of its own and stays: the new state did not publish
to it, so the next run refuses it until ``diffcdc reload --sink`` gives it a full image on
purpose), and forgets the table's state so the next run starts
with a fresh initial load. The intent is recorded in the state first: a drop that dies half-way
is finished by running it again, and a ``run`` refuses the table meanwhile.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable

from diffcdc.config import TableConfig
from diffcdc.sinks.registry import drop_sink_output, sink_drop_target
from diffcdc.state.root import StateRoot
from diffcdc.state.store import TableState


def drop_targets(table: TableConfig) -> list[str]:
    """What a drop of ``table`` deletes of its sinks' output, as its confirmation names it."""
    ident = table.sink_table()
    return [t for s in table.sinks if (t := sink_drop_target(s, ident)) is not None]


def drop_table(
    table: TableConfig, state_root: StateRoot | str, say: Callable[[str], None] | None = None
) -> str:
    """Drop ``table`` from its sinks and its state; returns where the dropped output was."""
    say = say or (lambda message: None)
    state = TableState(state_root, table.state_name)
    ident = table.sink_table()
    # The drop request names the table's folder as a landing zone lays it out (status shows it).
    folder = f"{table.schema_name}.schema/{table.name}" if table.schema_name else table.name
    places = []
    with state.lock():
        state.requests.request_drop(folder)
        for sink in table.sinks:
            where = drop_sink_output(sink, ident, say)
            if where is not None:
                places.append(where)
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
