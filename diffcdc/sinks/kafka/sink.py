"""The Kafka sink: a table's changes as Avro container files with ``sys_op`` (spec §4).

``accept`` refuses what the target cannot take (updates or deletes for a standalone table),
``check`` makes sure the topic exists, ``stage`` encodes the change set into part files on the
executors and records where the resume check starts reading, ``publish`` sends the missing
parts in one transaction, ``is_published`` is that resume check, ``replay`` rebuilds the
table as a ``read_committed`` consumer does. See docs/kafka.md.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from diffcdc.sinks.base import ChangeSet, Replayed, Sink, SinkHistory, SinkTable
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
        """The broker answers, the topic exists (created if missing) and has the partition."""
        self.clients.ensure_topic()
        self._topic_checked = True

    def stage(self, changes: ChangeSet, staging_dir: str, history: SinkHistory) -> dict[str, Any]:
        """Encode the change set into part files under ``staging_dir``; return the manifest."""
        self.accept(changes)
        c = self.config
        logical = c.mode == "logical"
        layout = avro_layout(changes.schema, self.table.keys, self.record_name, logical=logical, table=self.table.name)
        scan_from = None
        parts: list[dict[str, Any]] = []
        if changes.rows:
            if not self._topic_checked:
                self.check(history)
            scan_from = self.clients.end_offset()  # nothing of this version can lie before
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

    def publish(
        self,
        version: int,
        manifest: dict[str, Any],
        staging_dir: str,
        history: SinkHistory | None = None,
    ) -> None:
        """Send the staged parts not yet in the topic, in one transaction (see publish.py)."""
        if manifest["parts"]:
            self.clients.ensure_topic()  # a retry may come without check(), after an outage
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
