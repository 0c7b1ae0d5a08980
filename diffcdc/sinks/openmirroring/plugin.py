"""The Open Mirroring landing-zone sink as the rest of diffcdc sees it (see
:mod:`diffcdc.sinks.plugin`): its files in a run's result and its next sequence number in
``status``, its table folder dropped by ``diffcdc drop``, and the checks that a landing root is
the one the state published to. Its table-level shorthand (the landing fields of a table
without ``sinks``) is :mod:`diffcdc.sinks.openmirroring.shorthand`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from diffcdc.errors import DiffcdcError, UsageError
from diffcdc.sinks.openmirroring.config import OpenMirroringSinkConfig
from diffcdc.sinks.plugin import Capabilities, ResultFiles, SinkPlugin
from diffcdc.sinks.table import SinkTable

if TYPE_CHECKING:
    from diffcdc.sinks.base import Sink
    from diffcdc.state.store import TableState


class OpenMirroringPlugin(SinkPlugin):
    """The ``open_mirroring`` sink type."""

    type = "open_mirroring"
    config = OpenMirroringSinkConfig
    path_fields = ("landing",)
    capabilities = Capabilities(
        drop=True, target_checks=True, byte_store=True,
        executor_modules=("diffcdc.sinks.openmirroring.staging",),
    )

    @classmethod
    def build(cls, config: OpenMirroringSinkConfig, table: SinkTable, state: TableState) -> Sink:
        from diffcdc.sinks.openmirroring.sink import OpenMirroringSink

        return OpenMirroringSink(config.sink_id, table, config, state.sink_marks(config.sink_id))

    @classmethod
    def result(cls, manifest: Mapping[str, Any]) -> ResultFiles:
        files = tuple(f["name"] for f in manifest.get("files") or [])
        return ResultFiles(files, manifest["sequence"]["first"] if files else None)

    @classmethod
    def status(cls, manifest: Mapping[str, Any]) -> dict[str, Any]:
        return {"target": manifest.get("landing"),
                "next_sequence": (manifest.get("sequence") or {}).get("next")}

    @classmethod
    def drop_target(cls, config: OpenMirroringSinkConfig, table: SinkTable) -> str:
        from diffcdc.sinks.openmirroring.drop import drop_target

        return drop_target(config, table)

    @classmethod
    def drop(cls, config: OpenMirroringSinkConfig, table: SinkTable, say: Callable[[str], None]) -> str:
        from diffcdc.sinks.openmirroring.drop import drop_folder

        return drop_folder(config, table, say)

    @classmethod
    def published_output(cls, config: OpenMirroringSinkConfig, table: SinkTable) -> str | None:
        """Where the table's folder already holds ``_metadata.json``."""
        from diffcdc.sinks.openmirroring.contract import table_folder
        from diffcdc.sinks.openmirroring.landing import open_landing
        from diffcdc.sinks.openmirroring.metadata import METADATA_FILE
        from diffcdc.storage.base import join

        try:
            storage = open_landing(config.landing, **config.landing_options)
            try:
                target = join(table_folder(table.name, table.schema_name), METADATA_FILE)
                if storage.stat(target) is not None:
                    return f"{storage.describe()}/{target}"
            finally:
                storage.close()
        except (DiffcdcError, OSError):  # unreachable or refused: the table's run reports it
            return None
        return None

    @classmethod
    def check_target(cls, config: OpenMirroringSinkConfig, manifest: Mapping[str, Any], table: SinkTable,
                      state_given: bool) -> None:
        """Refuse a local landing root other than the one the state published to, while that one
        still exists: a wrong ``--landing`` (or the state root of another landing zone) would
        otherwise continue the table's numbering in a folder that never had its first files."""
        published = manifest.get("landing")
        if not isinstance(published, str) or not os.path.isabs(published) or "://" in config.landing:
            return
        if not os.path.isdir(published) or os.path.abspath(config.landing) == published:
            return
        if os.path.isdir(config.landing) and os.path.samefile(config.landing, published):
            return
        state_fix = "check --state (or the config file's state)" if state_given else \
            "give --state ROOT (default ./state, relative to the working directory)"
        raise UsageError(
            f"its state says it was published to the landing root {published}, not "
            f"{os.path.abspath(config.landing)}",
            table=table.name,
            hint=f"give the landing root it was published to (--landing or the config file); "
            f"if this landing root is right, the state is another one's: {state_fix}",
        )
