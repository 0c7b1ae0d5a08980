"""Avro Object Container Files as message bodies, cut to the message limits.

A body is one complete container file (Avro spec, "Object Container Files"): the magic
``Obj\\x01``, a metadata map (``avro.schema``, ``avro.codec`` = ``null``, ``diffcdc.columns``),
a 16-byte sync marker, then one data block: record count, byte size, the records, the marker.

:class:`MessageWriter` takes encoded records in Arrow-batch-sized chunks and closes a body
whenever the next record would pass ``max_records`` or ``max_bytes`` (the whole body, header
included). A single record larger than the byte limit still gets a body of its own; the stage
step refuses it with a clear message (see :mod:`diffcdc.sinks.kafka.stage`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from diffcdc.storage import paths

MAGIC = b"Obj\x01"
#: Room left in a body for the block's record count and byte size (two varints) and sync marker.
BLOCK_OVERHEAD = 10 + 10 + 16


def zigzag_varint(value: int) -> bytes:
    """One Avro ``long`` in binary encoding."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_bytes(data: bytes) -> bytes:
    return zigzag_varint(len(data)) + data


def sync_marker(table: str, version: int) -> bytes:
    """The 16-byte sync marker: derived from table and version, so bodies are reproducible."""
    return hashlib.sha256(f"diffcdc/{table}/{version}".encode()).digest()[:16]


def container_header(schema: dict[str, Any], columns: list[str], sync: bytes) -> bytes:
    """The header of a container file: magic, metadata map, sync marker."""
    meta = {
        "avro.schema": json.dumps(schema, separators=(",", ":")).encode(),
        "avro.codec": b"null",
        "diffcdc.columns": json.dumps(columns, ensure_ascii=False, separators=(",", ":")).encode(),
    }
    body = zigzag_varint(len(meta))
    for key, value in meta.items():
        body += _avro_bytes(key.encode()) + _avro_bytes(value)
    return MAGIC + body + zigzag_varint(0) + sync


@dataclass(frozen=True)
class WrittenBody:
    """One container file written by :class:`MessageWriter`."""

    path: str
    records: int
    bytes: int
    sha256: str


class MessageWriter:
    """Cuts encoded records into container files of bounded size under ``folder``."""

    def __init__(
        self, folder: str, header: bytes, sync: bytes, max_records: int, max_bytes: int
    ) -> None:
        self.folder = folder
        self.header = header
        self.sync = sync
        self.max_records = max_records
        self.budget = max(1, max_bytes - len(header) - BLOCK_OVERHEAD)  # for the records
        self._chunks: list[np.ndarray] = []
        self._records = 0
        self._bytes = 0
        self.written: list[WrittenBody] = []

    def add(self, data: np.ndarray, ends: np.ndarray) -> None:
        """Append records (``data`` back to back, ``ends`` their end offsets)."""
        i, n = 0, len(ends)
        while i < n:
            start = int(ends[i - 1]) if i else 0
            room_records = self.max_records - self._records
            room_bytes = self.budget - self._bytes
            fit = int(np.searchsorted(ends, start + room_bytes, side="right")) - i
            take = min(fit, room_records, n - i)
            if take <= 0:
                if self._records:
                    self.flush()
                    continue
                take = 1  # a record larger than a whole body: alone, refused by stage
            stop = int(ends[i + take - 1])
            self._chunks.append(data[start:stop])
            self._records += take
            self._bytes += stop - start
            i += take
            if i < n:
                self.flush()  # the next record does not fit

    def empty(self) -> WrittenBody:
        """Write a container file of no records (the header alone: an Avro file of no
        blocks), the message of a full image of an empty snapshot."""
        path = paths.join(self.folder, f"{uuid.uuid4().hex}.avro")
        paths.write_bytes(path, self.header)
        written = WrittenBody(path, 0, len(self.header), hashlib.sha256(self.header).hexdigest())
        self.written.append(written)
        return written

    def flush(self) -> None:
        """Write the pending records as one container file (nothing when none are pending)."""
        if not self._records:
            return
        path = paths.join(self.folder, f"{uuid.uuid4().hex}.avro")
        block_head = zigzag_varint(self._records) + zigzag_varint(self._bytes)
        body = b"".join((self.header, block_head, *self._chunks, self.sync))
        paths.write_bytes(path, body)
        sha256 = hashlib.sha256(body).hexdigest()
        self.written.append(WrittenBody(path, self._records, len(body), sha256))
        self._chunks, self._records, self._bytes = [], 0, 0

