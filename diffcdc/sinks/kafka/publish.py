"""Publishing a staged version exactly once: one Kafka transaction, and a resume check.

Every message of a version carries headers naming the table, the version and its part number
(see :func:`message_headers`). Publishing a version:

1. ``init_transactions`` with the transactional id the version was staged with (its manifest
   records it; the sink's stable id): the broker fences any earlier producer of the table (a
   killed run) and aborts its open transaction. The sink does this before its target check
   reads the partition's end (:func:`open_producer`): while a killed run's transaction is
   open, a ``read_committed`` reader's end is held at its start (Tansu 0.6 answers offset 0). A version staged with another id than the
   sink's last version that sent messages (the default id changed, or the config's) first
   fences that earlier id the same way (``fences`` in its manifest);
2. read the sink's partition ``read_committed`` from the offset recorded at stage time (the
   partition's end before this version was encoded, so nothing of it can lie before) and
   collect the parts of this version already there; a part there with other bytes than staged
   is a conflict (two writers of one table) and stops the run;
3. if parts are missing, send exactly those in one transaction and commit it.

On a broker that implements transactions fully, an aborted attempt is invisible to
``read_committed`` readers, so step 2 finds all parts or none. Some Kafka-protocol brokers
(Tansu 0.6, used by the tests) do not filter aborted records for ``read_committed`` readers:
there step 2 sees the parts of the killed attempt and step 3 sends only the rest, so a
``read_committed`` reader still sees every part exactly once.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from diffcdc.errors import PublishConflict, StateError
from diffcdc.faults import ENV as CRASH_ENV
from diffcdc.faults import crash_point
from diffcdc.sinks.kafka.client import KafkaClients, header_map
from diffcdc.storage import paths

H_TABLE = "diffcdc-table"
H_VERSION = "diffcdc-version"
H_PART = "diffcdc-part"
H_PARTS = "diffcdc-parts"
H_RECORDS = "diffcdc-records"
H_MODE = "diffcdc-mode"
H_SNAPSHOT = "diffcdc-snapshot"
H_SHA256 = "diffcdc-sha256"
H_INITIAL = "diffcdc-initial"
H_RECREATE = "diffcdc-recreate"
H_WRITER = "diffcdc-writer"


def message_key(table: str, version: int, part: int) -> bytes:
    """The message key: ``<table>/<version>/<part>`` (UTF-8; the part is 1-based)."""
    return f"{table}/{version}/{part}".encode()


def message_headers(
    table: str, version: int, part: dict[str, Any], number: int, manifest: dict[str, Any]
) -> list[tuple[str, bytes]]:
    """The headers of part ``number`` (1-based) of a staged version."""
    headers = {
        H_TABLE: table,
        H_VERSION: str(version),
        H_PART: str(number),
        H_PARTS: str(len(manifest["parts"])),
        H_RECORDS: str(part["records"]),
        H_MODE: manifest["mode"],
        H_SNAPSHOT: manifest.get("snapshot_id") or "",
        H_SHA256: part["sha256"],
        H_INITIAL: "1" if manifest.get("initial") else "0",
    }
    if manifest.get("recreate"):
        headers[H_RECREATE] = str(manifest["recreate"])
    if manifest.get("writer"):
        headers[H_WRITER] = str(manifest["writer"])
    return [(k, v.encode()) for k, v in headers.items()]


def published_parts(
    clients: KafkaClients, version: int, manifest: dict[str, Any]
) -> dict[int, int]:
    """Parts of ``version`` a ``read_committed`` reader sees from the recorded offset on.

    Returns part number → how many times it is there. Raises :class:`PublishConflict` when a
    part there differs from the staged one.
    """
    table = clients.table
    expected = {n: p["sha256"] for n, p in enumerate(manifest["parts"], start=1)}
    found: dict[int, int] = {}
    for message in clients.read_partition(manifest.get("scan_from")):
        headers = header_map(message)
        if headers.get(H_TABLE) != table or headers.get(H_VERSION) != str(version):
            continue
        number = int(headers.get(H_PART, "0"))
        digest = hashlib.sha256(message.value() or b"").hexdigest()
        if expected.get(number) != digest:
            raise PublishConflict(
                f"Kafka sink {clients.sink_id} ({clients.target}): offset {message.offset()} holds "
                f"part {number} of version {version} with other content than the staged batch",
                table=table,
                hint="another writer publishes this table to the topic; stop it (or give this "
                "sink its own topic/transactional_id) and re-create the table",
            )
        found[number] = found.get(number, 0) + 1
    return found


def _read_part(staging_dir: str, part: dict[str, Any], table: str) -> bytes:
    path = paths.join(staging_dir, part["file"])
    try:
        body = paths.read_bytes(path)
    except OSError:
        body = b""
    if hashlib.sha256(body).hexdigest() != part["sha256"]:
        raise StateError(
            f"staged message {part['file']} is missing or altered",
            table=table,
            path=path,
            hint="the state folder was altered; restore it from backup or re-create the table",
        )
    return body


def open_producer(clients: KafkaClients, manifest: dict[str, Any]) -> Producer:
    """The transactional producer a staged version is published with, initialised: the
    earlier producers of its id (and of ``fences``) are fenced and a killed run's open
    transaction is aborted. Done before the topic's end is read: an open transaction holds a
    ``read_committed`` reader's end at its start (on Tansu 0.6 at offset 0)."""
    txn = manifest.get("transactional_id") or clients.legacy_transactional_id
    fences = manifest.get("fences")
    if fences and fences != txn:
        _fence(clients, fences)
    producer = clients.producer(txn)
    try:
        producer.init_transactions(clients.timeout)
    except KafkaException as exc:
        raise clients.error(exc, "starting the transactional producer") from None
    return producer


def publish_version(
    clients: KafkaClients,
    version: int,
    manifest: dict[str, Any],
    staging_dir: str,
    producer: Producer | None = None,
) -> int:
    """Publish the staged parts of ``version`` that are not in the topic yet; return how many
    (``producer``: one :func:`open_producer` gave for this manifest; None: open it here)."""
    if not manifest["parts"]:
        return 0
    config, table, timeout = clients.config, clients.table, clients.timeout
    if producer is None:
        producer = open_producer(clients, manifest)
    found = published_parts(clients, version, manifest)
    missing = [n for n in range(1, len(manifest["parts"]) + 1) if n not in found]
    if not missing:
        return 0
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    try:
        producer.begin_transaction()
        for count, number in enumerate(missing, start=1):
            part = manifest["parts"][number - 1]
            body = _read_part(staging_dir, part, table)
            _produce(
                producer,
                topic=config.topic,
                value=body,
                key=message_key(table, version, number),
                partition=config.partition,
                headers=message_headers(table, version, part, number, manifest),
                on_delivery=delivered,
            )
            if os.environ.get(CRASH_ENV):
                producer.flush(timeout)  # the broker has it when the test's crash point fires
            crash_point("publish", count, scope=clients.sink_id)
        if producer.flush(timeout) > 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "messages not delivered in time"))
        if failures:
            raise KafkaException(failures[0])
        crash_point("kafka_before_commit", scope=clients.sink_id)
        producer.commit_transaction(timeout)
    except KafkaException as exc:
        _abort(producer, timeout)
        raise clients.error(exc, f"publishing version {version}") from None
    except BaseException:
        _abort(producer, timeout)
        raise
    crash_point("kafka_after_commit", scope=clients.sink_id)
    return len(missing)


def _fence(clients: KafkaClients, transactional_id: str) -> None:
    """Fence the producers of the id the sink's earlier versions were published with (the
    default changed, or ``transactional_id`` was changed in the config): a killed run's open
    transaction under that id is aborted, and a frozen run that wakes up cannot commit it."""
    producer = clients.producer(transactional_id)
    try:
        producer.init_transactions(clients.timeout)
    except KafkaException as exc:
        raise clients.error(exc, f"fencing the earlier transactional id {transactional_id}") from None


def _produce(producer: Producer, **kwargs: Any) -> None:
    """``produce`` that waits for room when librdkafka's local queue is full."""
    while True:
        try:
            producer.produce(**kwargs)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.5)


def _abort(producer: Producer, timeout: float) -> None:
    """Abort the open transaction if possible (a fenced or unreachable producer cannot)."""
    try:
        producer.abort_transaction(timeout)
    except KafkaException:
        pass
