"""The Kafka sink: a table's changes as Avro container files with ``sys_op`` (spec §4).

``accept`` refuses what the target cannot take (updates or deletes for a standalone table),
``check`` makes sure the topic exists and has not lost what was published to it, ``stage``
encodes the change set into part files on the executors and records where the resume check
starts reading, ``publish`` sends the missing parts in one transaction, ``is_published`` is
that resume check, ``replay`` rebuilds the table as a ``read_committed`` consumer does. See
docs/kafka.md.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from diffcdc.core.compare import Replayed
from diffcdc.errors import DiffcdcError, TargetMismatch
from diffcdc.sinks.base import ChangeSet, Sink, SinkHistory, SinkTable
from diffcdc.sinks.kafka.client import KafkaClients
from diffcdc.sinks.kafka.config import KafkaSinkConfig
from diffcdc.sinks.kafka.errors import StandaloneRefused
from diffcdc.sinks.kafka.publish import publish_version, published_parts
from diffcdc.sinks.kafka.replay import replay_topic
from diffcdc.sinks.kafka.schema import avro_layout, avro_name, json_columns
from diffcdc.sinks.kafka.stage import stage_parts

#: Bumped when the staged layout changes (kept in every manifest).
MANIFEST_FORMAT = 1


class KafkaSink(Sink):
    """One Kafka topic partition receiving a table's committed versions exactly once."""

    type = "kafka"

    def __init__(self, sink_id: str, table: SinkTable, config: KafkaSinkConfig) -> None:
        super().__init__(sink_id, table)
        self.config = config
        self.clients = KafkaClients(config, table.name, sink_id)
        self.record_name = config.schema_name or avro_name(table.name)
        self._topic_checked = False

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
            return
        raise StandaloneRefused(
            f"Kafka sink {self.id} is standalone (insert-only) but the changes hold "
            f"{changes.updated} update(s) and {changes.deleted} delete(s)",
            table=self.table.name,
            snapshot=changes.snapshot_id,
            hint="nothing was published; fix the extract so rows are only added, or set "
            "mode = \"logical\" for the sink (the target must be a logical table then)",
        )

    def check(self, history: SinkHistory) -> None:
        """The broker answers and the topic is where this sink left it: it exists (created if
        nothing was published to it yet) and its partition's end is not below what was
        published."""
        self._verify(list(history.manifests))
        self._topic_checked = True

    def _verify(self, published: list[tuple[int, dict[str, Any]]]) -> None:
        """Refuse a topic that lost what this sink published in ``published`` (its versions
        before the one at hand, all published): deleted, re-created, or a broker that came
        back without its messages. Consumers rebuilding from it would silently miss them."""
        sent = [(v, m) for v, m in published if m.get("parts")]
        if not sent:
            self.clients.ensure_topic()
            return
        version, manifest = sent[-1]
        if self.clients.ensure_topic(create=False) is None:
            raise self._mismatch(
                f"topic {self.config.topic} is gone: it held diffcdc version {version}"
            )
        # The version's messages lie after the end recorded when it was staged.
        floor = int(manifest.get("scan_from") or 0) + len(manifest["parts"])
        end = self.clients.end_offset()
        if end < floor:
            raise self._mismatch(
                f"topic {self.config.topic} lost messages: partition {self.config.partition} "
                f"ends at offset {end}, diffcdc published version {version} up to at least "
                f"offset {floor}"
            )

    def _mismatch(self, message: str) -> TargetMismatch:
        return TargetMismatch(
            f"Kafka sink {self.id} ({self.clients.target}): {message}",
            table=self.table.name,
            hint="consumers rebuilding from the topic would miss changes; publish a full image "
            f"to it with '{self.reload_command()}'",
        )

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        """Encode the change set into part files under ``staging_dir``; return the manifest."""
        self.accept(changes)
        c = self.config
        logical = c.mode == "logical"
        layout = avro_layout(changes.schema, self.table.keys, self.record_name, logical=logical, table=self.table.name)
        scan_from = None
        parts: list[dict[str, Any]] = []
        if changes.rows:
            scan_from = self._scan_from(history)
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
            "parts": parts,
        }

    def _scan_from(self, history: SinkHistory) -> int:
        """Where the resume check of a version being staged starts reading: the partition's
        end now (nothing of the version can lie before). A sink that cannot reach its broker
        (it fails on its own in this run) takes the start of its last published version's
        scan instead: its versions are published in order, so this one lies after that."""
        try:
            if not self._topic_checked:
                self.check(history)
            return self.clients.end_offset()
        except DiffcdcError:
            sent = [m for _, m in history.manifests if m.get("parts")]
            return int(sent[-1].get("scan_from") or 0) if sent else 0

    def publish(
        self,
        version: int,
        manifest: dict[str, Any],
        staging_dir: str,
        history: SinkHistory | None = None,
    ) -> None:
        """Check the topic is where this sink left it, then send the staged parts not yet in
        it, in one transaction (see publish.py)."""
        if manifest["parts"]:
            before = [(v, m) for v, m in (history.manifests if history else ()) if v < version]
            self._verify(before)
        publish_version(self.clients, version, manifest, staging_dir)

    def is_published(self, version: int, manifest: dict[str, Any]) -> bool:
        """Whether a ``read_committed`` reader sees every part of ``version``."""
        if not manifest["parts"]:
            return True
        found = published_parts(self.clients, version, manifest)
        return all(n in found for n in range(1, len(manifest["parts"]) + 1))

    def replay(self, spark: SparkSession) -> Replayed:
        """The table as a ``read_committed`` consumer applying every message rebuilds it."""
        return replay_topic(self.clients, list(self.table.keys))

    def comparable(self, snapshot: DataFrame) -> DataFrame:
        """The snapshot with nested columns as JSON text, as the messages carry them."""
        return json_columns(snapshot)
