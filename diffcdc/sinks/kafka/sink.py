"""The Kafka sink: a table's changes as Avro container files with ``sys_op`` (spec §4).

``accept`` refuses what the target cannot take (updates or deletes for a standalone table),
``check`` makes sure the topic exists and has not lost what was published to it, ``stage``
encodes the change set into part files on the executors and records where the resume check
starts reading, ``publish`` sends the missing parts in one transaction, ``is_published`` is
that resume check, ``replay`` rebuilds the table as a ``read_committed`` consumer does. See
docs/kafka.md.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from diffcdc.core.compare import Replayed
from diffcdc.errors import DiffcdcError, TargetMismatch
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.kafka.client import KafkaClients, header_map
from diffcdc.sinks.kafka.config import KafkaSinkConfig
from diffcdc.sinks.kafka.errors import StandaloneRefused
from diffcdc.sinks.kafka.publish import (
    H_PART,
    H_TABLE,
    H_VERSION,
    H_WRITER,
    message_key,
    open_producer,
    publish_version,
    published_parts,
)
from diffcdc.sinks.kafka.replay import replay_topic
from diffcdc.sinks.kafka.schema import avro_layout, avro_name, json_columns
from diffcdc.sinks.kafka.stage import stage_parts

if TYPE_CHECKING:
    from diffcdc.state.store import TableState

#: Bumped when the staged layout changes (kept in every manifest).
MANIFEST_FORMAT = 1


class KafkaSink(Sink):
    """One Kafka topic partition receiving a table's committed versions exactly once."""

    type = "kafka"

    def __init__(
        self, sink_id: str, table: SinkTable, config: KafkaSinkConfig, state: TableState | None = None
    ) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.clients = KafkaClients(config, table.name, sink_id, table.schema_name)
        self.clients.gone_hint = f"publish a full image to it with '{self.reload_command()}'"
        self.record_name = config.schema_name or avro_name(table.name)
        self.state = state
        self._topic_checked = False
        self._writer: str | None = None
        #: The change set ``accept`` passed (``stage`` does not ask again).
        self._accepted: ChangeSet | None = None
        #: This sink's manifests in the table's log when first asked, newest first (the log is
        #: listed once per run; versions this run adds are in the histories it is handed).
        self._logged: list[dict[str, Any]] | None = None

    def describe(self) -> dict[str, Any]:
        """Type, ``<bootstrap>/<topic>``, mode and where the messages go; no secrets."""
        c = self.config
        return {
            "type": self.type,
            "target": self.clients.target,
            "mode": c.mode,
            "partition": c.partition,
            "schema_name": self.record_name,
            "transactional_id": self.clients.transactional_id,
        }

    def accept(self, changes: ChangeSet) -> None:
        """Refuse a change set a standalone (insert-only) target cannot take."""
        if self.config.mode != "standalone" or not (changes.updated or changes.deleted):
            self._accepted = changes
            return
        raise StandaloneRefused(
            f"Kafka sink {self.id} is standalone (insert-only) but the changes hold "
            f"{changes.updated} update(s) and {changes.deleted} delete(s)",
            table=self.table.name,
            snapshot=changes.snapshot_id,
            hint="nothing was published; fix the extract so rows are only added, or set "
            "mode = \"logical\" for the sink (the target must be a logical table then)",
        )

    def _accept_once(self, changes: ChangeSet) -> None:
        if changes is not self._accepted:
            self.accept(changes)

    # ------------------------------------------------------------------ who wrote the topic

    def _recorded(self, history: SinkHistory | None = None) -> list[dict[str, Any]]:
        """This sink's manifests, newest first: ``history``'s, then every one the table's state
        still holds (earlier incarnations and versions before a full image too)."""
        found = [m for _, m in reversed(history.manifests)] if history is not None else []
        if self.state is not None and self._logged is None:
            self._logged = [c.record.sinks[self.id].manifest
                            for c in reversed(self.state.commits()) if self.id in c.record.sinks]
        return found + (self._logged or [])

    def _writer_id(self, history: SinkHistory) -> str:
        """The id this state's messages to the topic carry (``diffcdc-writer``): random, made
        at the sink's first version and carried on in every manifest, so a foreign writer or
        another diffcdc state (another config on the same topic) cannot produce it by accident."""
        if self._writer is None:
            recorded = (m.get("writer") for m in self._recorded(history))
            self._writer = next((w for w in recorded if w), None) or uuid.uuid4().hex
        return self._writer

    def _known_writers(self, manifests: list[dict[str, Any]]) -> set[str]:
        known = {m["writer"] for m in [*manifests, *self._recorded()] if m.get("writer")}
        return known | ({self._writer} if self._writer else set())

    # ------------------------------------------------------------------ target checks

    def check(self, history: SinkHistory) -> None:
        """The broker answers and the topic is where this sink left it: it exists (created if
        nothing was published to it yet), it is the topic the sink published to (same topic
        id, its own last version read back at the offsets it recorded), or, before the sink
        has sent anything to it, it holds nothing but this state's messages."""
        self._writer_id(history)
        self._verify(list(history.manifests))
        self._topic_checked = True

    def _verify(self, published: list[tuple[int, dict[str, Any]]], current: dict[str, Any] | None = None) -> None:
        """Refuse a topic that is not the one this sink left (``published``: its versions
        before the one at hand, all published; ``current``: the manifest about to be published).

        Once the sink sent messages: the topic must exist with the topic id recorded at stage
        time, its end must not be below what was published, and the first message of the last
        published version found from its recorded scan start on must be that version's own
        part (same headers and bytes). Before: the topic may only hold this state's messages
        (refused when it holds another's or a foreign writer's), unless a full image is
        published on purpose (a reload, a re-created table)."""
        sent = [(v, m) for v, m in published if m.get("parts")]
        if not sent:
            self.clients.ensure_topic()
            manifests = [m for _, m in published] + ([current] if current is not None else [])
            if not any(m.get("recreate") for m in manifests):
                self._claim(manifests)
            return
        version, manifest = sent[-1]
        if self.clients.ensure_topic(create=False) is None:
            raise self._mismatch(
                f"topic {self.config.topic} is gone: it held diffcdc version {version}"
            )
        recorded = manifest.get("topic_id")
        now = self.clients.topic_id() if recorded else None
        if recorded and now and now != recorded:
            raise self._mismatch(
                f"topic {self.config.topic} was deleted and created again (topic id {now}, "
                f"diffcdc published version {version} to topic id {recorded})"
            )
        # The version's messages lie after the end recorded when it was staged.
        scan_from = int(manifest.get("scan_from") or 0)
        floor = scan_from + len(manifest["parts"])
        low, end = self.clients.watermarks()
        if end < floor:
            raise self._mismatch(
                f"topic {self.config.topic} lost messages: partition {self.config.partition} "
                f"ends at offset {end}, diffcdc published version {version} up to at least "
                f"offset {floor}"
            )
        self._read_back(version, manifest, scan_from, low)
        self._no_other_state([m for _, m in published] + ([current] if current is not None else []))

    def _no_other_state(self, manifests: list[dict[str, Any]]) -> None:
        """Refuse a topic whose last message another diffcdc state wrote after this sink's
        (two states that both took an empty topic): each would go on as if it were its own."""
        last = self.clients.last_message()
        writer = header_map(last).get(H_WRITER) if last is not None else None
        if last is None or not writer or writer in self._known_writers(manifests):
            return
        raise TargetMismatch(
            f"Kafka sink {self.id} ({self.clients.target}): topic {self.config.topic} holds "
            f"diffcdc messages another state published after this sink's (the last at offset "
            f"{last.offset()}): another state or config uses the topic",
            table=self.table.name,
            hint="give each config's sink a topic of its own; only if this table owns the "
            f"topic, publish a full image after what is there with '{self.reload_command()}'",
        )

    def _read_back(self, version: int, manifest: dict[str, Any], scan_from: int, low: int) -> None:
        """The first message of ``version`` from ``scan_from`` on must be one of its parts as
        staged (key, headers, bytes). Messages the topic's retention removed (its start moved
        past ``scan_from``) cannot be read back: then the topic id alone identifies it."""
        table = self.table.name
        expected = {n: p["sha256"] for n, p in enumerate(manifest["parts"], start=1)}
        for message in self.clients.read_partition(max(scan_from, low)):
            headers = header_map(message)
            if headers.get(H_TABLE) != table or headers.get(H_VERSION) != str(version):
                continue
            part = headers.get(H_PART, "")
            number = int(part) if part.isdigit() else 0
            digest = hashlib.sha256(message.value() or b"").hexdigest()
            writer = manifest.get("writer")
            if (expected.get(number) != digest or message.key() != message_key(table, version, number)
                    or (writer and headers.get(H_WRITER) != writer)):
                raise self._mismatch(
                    f"topic {self.config.topic} offset {message.offset()} holds a version "
                    f"{version} message that is not the one this sink published (other "
                    f"content or writer): another writer uses the topic"
                )
            return
        if low > scan_from:
            return  # removed by the topic's retention, not by someone else
        raise self._mismatch(
            f"topic {self.config.topic} does not hold the diffcdc version {version} this sink "
            f"published at offset {scan_from} or after: the topic was deleted and created "
            f"again, or written by someone else"
        )

    def _claim(self, manifests: list[dict[str, Any]]) -> None:
        """Before the sink has sent a message to the topic (a first load, a sink added to a
        table): refuse a topic whose last message is not this state's — another state's (a
        second config publishing to the same topic) or a foreign writer's. A consumer would
        take the full image for a continuation of what is there."""
        last = self.clients.last_message()
        if last is None:
            return
        headers = header_map(last)
        if headers.get(H_WRITER) and headers[H_WRITER] in self._known_writers(manifests):
            return
        if not headers.get(H_WRITER) and headers.get(H_TABLE) == self.table.name:
            # written before messages carried a writer: this state's if its bytes are those
            # of a part the state still records
            digest = hashlib.sha256(last.value() or b"").hexdigest()
            if any(p.get("sha256") == digest for m in [*manifests, *self._recorded()]
                   for p in m.get("parts") or ()):
                return
        if headers.get(H_TABLE):
            whose = (f"diffcdc messages of table {headers[H_TABLE]} (version "
                     f"{headers.get(H_VERSION)}) that this state did not publish")
        else:
            whose = "messages diffcdc did not publish"
        raise TargetMismatch(
            f"Kafka sink {self.id} ({self.clients.target}): topic {self.config.topic} already "
            f"holds {whose} (the last at offset {last.offset()}): another state or writer "
            "uses it",
            table=self.table.name,
            hint="give the sink a topic of its own; only if this table owns the topic, "
            f"publish a full image after what is there with '{self.reload_command()}'",
        )

    def _mismatch(self, message: str) -> TargetMismatch:
        return TargetMismatch(
            f"Kafka sink {self.id} ({self.clients.target}): {message}",
            table=self.table.name,
            hint="consumers rebuilding from the topic would miss changes; publish a full image "
            f"to it with '{self.reload_command()}'",
        )

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        """Encode the change set into part files under ``staging_dir``; return the manifest
        (refusing, as ``accept`` does, a change set the engine has not had accepted)."""
        self._accept_once(changes)
        c = self.config
        logical = c.mode == "logical"
        layout = avro_layout(changes.schema, self.table.keys, self.record_name, logical=logical, table=self.table.name)
        scan_from = topic_id = None
        parts: list[dict[str, Any]] = []
        # a full image of an empty snapshot is sent too (one message of no records, marked
        # initial): a consumer empties its table, as it does before any full image
        if changes.rows or changes.initial:
            scan_from, topic_id = self._scan_from(history)
            parts = stage_parts(
                changes,
                layout,
                staging_dir,
                max_records=c.max_records_per_message,
                max_bytes=c.max_message_bytes,
                sink=self.id,
            )
        return {
            "format": MANIFEST_FORMAT,
            "topic": c.topic,
            "partition": c.partition,
            "mode": c.mode,
            "snapshot_id": changes.snapshot_id,
            "schema": layout.schema,
            "initial": changes.initial,
            "recreate": changes.recreate,
            "records": sum(p["records"] for p in parts),
            "counts": {"inserted": changes.inserted, "updated": changes.updated, "deleted": changes.deleted},
            "scan_from": scan_from,
            "topic_id": topic_id,
            "writer": self._writer_id(history),
            "parts": parts,
            **self._transactional_ids(history),
        }

    def _transactional_ids(self, history: SinkHistory) -> dict[str, Any]:
        """The transactional id the version is published with, and the one to fence first when
        the sink's last version that sent messages used another (``fences``): a default that
        changed (it left the table's schema out before) or a changed ``transactional_id``."""
        ids: dict[str, Any] = {"transactional_id": self.clients.transactional_id}
        sent = next((m for m in self._recorded(history) if m.get("parts")), None)
        if sent is not None:
            before = sent.get("transactional_id") or self.clients.legacy_transactional_id
            if before != self.clients.transactional_id:
                ids["fences"] = before
        return ids

    def _scan_from(self, history: SinkHistory) -> tuple[int, str | None]:
        """Where the resume check of a version being staged starts reading: the partition's
        end now (nothing of the version can lie before), and the topic's id. A sink that cannot
        reach its broker (it fails on its own in this run) takes the start of its last
        published version's scan instead: its versions are published in order, so this one
        lies after that (and no topic id: the read-back alone identifies the topic)."""
        try:
            if not self._topic_checked:  # the check itself runs before the commit
                sent = any(m.get("parts") for _, m in history.manifests)
                if self.clients.ensure_topic(create=not sent) is None:
                    raise self._mismatch(f"topic {self.config.topic} is gone")
            return self.clients.end_offset(), self.clients.topic_id()
        except DiffcdcError:
            sent = [m for _, m in history.manifests if m.get("parts")]
            return (int(sent[-1].get("scan_from") or 0) if sent else 0), None

    def publish(
        self,
        version: int,
        manifest: dict[str, Any],
        staging_dir: str,
        history: SinkHistory | None = None,
        *,
        checked: bool = False,
    ) -> None:
        """Check the topic is where this sink left it, then send the staged parts not yet in
        it, in one transaction (see publish.py). The check runs even when ``checked`` (before
        this version's commit): the state's hashing and the other sinks' publishing came in
        between, and a message sent cannot be taken back."""
        if not manifest["parts"]:
            return
        # First fence a killed run's producer (its open transaction is aborted): the check
        # reads the partition's end, which an open transaction holds back.
        producer = open_producer(self.clients, manifest)
        before = [(v, m) for v, m in (history.manifests if history else ()) if v < version]
        self._verify(before, manifest)  # right before sending (protects the topic): changed since?
        publish_version(self.clients, version, manifest, staging_dir, producer)

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        """Whether a ``read_committed`` reader sees every part of ``version``."""
        if not manifest["parts"]:
            return True
        found = published_parts(self.clients, version, manifest)
        return all(n in found for n in range(1, len(manifest["parts"]) + 1))

    def replay(self, spark: SparkSession) -> Replayed:
        """The table as a ``read_committed`` consumer applying every message rebuilds it."""
        if self.clients.ensure_topic(create=False) is None:
            raise self._mismatch(f"topic {self.config.topic} does not exist (deleted, or never created)")
        return replay_topic(self.clients, list(self.table.keys))

    def comparable(self, snapshot: DataFrame) -> DataFrame:
        """The snapshot with nested columns as JSON text, as the messages carry them."""
        return json_columns(snapshot)
