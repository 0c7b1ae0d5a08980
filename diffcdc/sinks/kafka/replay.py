"""Reference consumer: the table as a ``read_committed`` reader of the topic rebuilds it.

Independent of the encoder: bodies are decoded with ``fastavro`` (the sink encodes with its
own numpy encoder), names are mapped back with the container's ``diffcdc.columns`` metadata.
Messages of the table are applied in offset order: logical mode ``sys_op`` 0 upserts by key,
1 deletes by key; standalone mode (no ``sys_op``) appends every record, so a duplicate shows.
The first message of a version marked ``diffcdc-initial: 1`` (a full image: first load, a
re-created table, a sink added later) starts from nothing, as a consumer truncates its target.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from diffcdc.core.compare import Replayed
from diffcdc.errors import LandingZoneMismatch
from diffcdc.sinks.kafka.client import KafkaClients, header_map
from diffcdc.sinks.kafka.publish import H_INITIAL, H_TABLE, H_VERSION
from diffcdc.sinks.kafka.schema import SYS_OP


def decode_body(body: bytes) -> tuple[list[str], bool, list[list[Any]]]:
    """``(column names, has sys_op, records as value lists)`` of one container file."""
    reader = fastavro.reader(io.BytesIO(body))
    schema = reader.writer_schema
    fields = [f["name"] for f in schema["fields"]]  # type: ignore[index]
    raw = reader.metadata.get("diffcdc.columns")
    columns = json.loads(raw) if raw else fields
    logical = len(fields) == len(columns) + 1 and fields[-1] == SYS_OP
    if not logical and len(fields) != len(columns):
        raise LandingZoneMismatch(f"diffcdc.columns names {len(columns)} columns, the schema {len(fields)} fields")
    return columns, logical, [list(rec.values()) for rec in reader]  # type: ignore[union-attr]


def replay_topic(clients: KafkaClients, keys: list[str]) -> Replayed:
    """Apply every committed message of the table from the partition's beginning."""
    image: dict[tuple[Any, ...], dict[str, Any]] = {}
    appended: list[dict[str, Any]] = []
    columns: list[str] = []
    units = 0
    version: str | None = None
    #: A message without the key columns: of an earlier incarnation (other keys, before a
    #: reload) when a later full image starts over, else a topic that does not fit the table.
    keyless: tuple[str | None, list[str]] | None = None
    for message in clients.read_partition(None):
        headers = header_map(message)
        if headers.get(H_TABLE) != clients.table:
            continue
        if headers.get(H_INITIAL) == "1" and headers.get(H_VERSION) != version:
            image.clear()
            appended.clear()
            keyless = None
        version = headers.get(H_VERSION)
        columns, logical, records = decode_body(message.value() or b"")
        width = len(columns)
        units += 1
        missing = [k for k in keys if k not in columns] if logical else []
        if missing:
            keyless = keyless or (version, missing)
            continue
        key_idx = [columns.index(k) for k in keys] if logical else []
        for values in records:
            row = dict(zip(columns, values[:width]))
            if not logical:
                appended.append(row)
                continue
            key = tuple(values[i] for i in key_idx)
            if values[width] == 1:
                image.pop(key, None)
            else:
                image[key] = row
    if keyless is not None:
        raise LandingZoneMismatch(
            f"Kafka sink {clients.sink_id}: the messages of version {keyless[0]} have no key "
            f"column(s) {keyless[1]} and no later full image replaces them",
            table=clients.table,
            path=clients.target,
            hint="the topic holds another table's or another incarnation's messages; check the "
            "sink's topic, or re-create the table (diffcdc reload)",
        )
    return Replayed(keys=list(keys), columns=columns, rows=[*image.values(), *appended], units=units)
