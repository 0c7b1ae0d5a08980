"""OpenLineage events of a run (docs/lineage.md): per version a table makes, a run of the job
``<namespace>/<table>`` — START when its snapshot is read, COMPLETE once it is committed and
published, FAIL when the table fails before that (also a table refused before any version:
START + FAIL), ABORT when the run is stopped with it open — with the source as the input
dataset and each sink as an output dataset.

The events are built from typed facts with no IO (:func:`start_event`, :func:`complete_event`,
:func:`fail_event`); :class:`LineageEmitter` sends them through the official client, in a
thread of its own, so a slow or absent receiver never slows a table down: the first failure is
one warning line and the events after it are dropped; at the run's end it waits a bounded time.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from diffcdc import __version__
from diffcdc.core.quality_report import GateReport, to_jsonable
from diffcdc.observe.naming import DatasetName, source_dataset
from diffcdc.observe.run_facts import TableFacts, VersionFacts, exit_class
from diffcdc.observe.settings import DEFAULT_TIMEOUT, LineageSettings, without_credentials

if TYPE_CHECKING:
    from openlineage.client.event_v2 import RunEvent

    from diffcdc.config import TableConfig

log = logging.getLogger("diffcdc")

#: The events' producer: this diffcdc release.
PRODUCER = f"https://pypi.org/project/diffcdc/{__version__}/"
#: Where the schemas of diffcdc's own facets are (shipped in diffcdc/observe/schemas/).
FACETS_URL = "https://github.com/diffcdc/diffcdc/blob/main/diffcdc/observe/schemas/"
RUN_FACET_SCHEMA = FACETS_URL + "DiffcdcRunFacet.json#/$defs/DiffcdcRunFacet"
CHANGES_FACET_SCHEMA = FACETS_URL + "DiffcdcChangesOutputDatasetFacet.json" \
    "#/$defs/DiffcdcChangesOutputDatasetFacet"


@dataclass(frozen=True)
class SinkDataset:
    """One sink of a table as an output dataset."""

    sink: str
    type: str
    dataset: DatasetName


@dataclass(frozen=True)
class LineageJob:
    """A table as OpenLineage sees it: the job, its input and its outputs."""

    namespace: str
    name: str
    source: DatasetName
    sinks: tuple[SinkDataset, ...]

    @classmethod
    def of(cls, table: TableConfig, namespace: str) -> LineageJob:
        from diffcdc.sinks.registry import plugin_of

        sinks = []
        for sink in table.sinks:
            named = plugin_of(sink).lineage_dataset(sink, table.sink_table())
            if named is not None:
                sinks.append(SinkDataset(sink.sink_id, sink.type, named))
        return cls(namespace, table.state_name, source_dataset(table), tuple(sinks))


# -- the events, from facts (no IO) --------------------------------------------------------


def _facets() -> tuple[Any, Any]:
    """diffcdc's own facets as client classes (made when lineage is used: the client is an
    extra)."""
    import attr
    from openlineage.client.generated.base import OutputDatasetFacet, RunFacet

    @attr.define
    class DiffcdcRunFacet(RunFacet):
        """diffcdc's facts of a run: the table, its snapshot and version, the release and,
        once it ended, its exit class."""

        table: str
        snapshotId: str | None = attr.field(default=None)  # noqa: N815 - the spec's case
        version: int | None = attr.field(default=None)
        diffcdcVersion: str = attr.field(default=__version__)  # noqa: N815
        exitClass: str | None = attr.field(default=None)  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return RUN_FACET_SCHEMA

    @attr.define
    class DiffcdcChangesOutputDatasetFacet(OutputDatasetFacet):
        """The rows a version changed, as the sink got them."""

        inserted: int
        updated: int
        deleted: int
        published: bool

        @staticmethod
        def _get_schema() -> str:
            return CHANGES_FACET_SCHEMA

    return DiffcdcRunFacet, DiffcdcChangesOutputDatasetFacet


def _time(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat()


def _schema_facet(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The schema facet of a Spark schema (JSON), or none."""
    from openlineage.client.generated.schema_dataset import (
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )

    def fields(struct: Mapping[str, Any]) -> list[SchemaDatasetFacetFields]:
        out = []
        for f in struct.get("fields") or ():
            kind = f.get("type")
            nested = fields(kind) if isinstance(kind, dict) and kind.get("type") == "struct" else []
            out.append(SchemaDatasetFacetFields(
                name=str(f.get("name")),
                type=kind if isinstance(kind, str) else str((kind or {}).get("type")),
                fields=nested))
        return out

    if not schema or not schema.get("fields"):
        return {}
    return {"schema": SchemaDatasetFacet(fields=fields(schema), producer=PRODUCER)}


def _assertions(gates: Sequence[GateReport]) -> dict[str, Any]:
    """The data-quality assertions facet of the gate's checks (none: no checks ran)."""
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion,
        DataQualityAssertionsDatasetFacet,
    )

    checks = [(g.stage, c) for g in gates for c in g.checks]
    if not checks:
        return {}
    return {"dataQualityAssertions": DataQualityAssertionsDatasetFacet(
        assertions=[Assertion(
            assertion=c.name, success=bool(c.passed or c.overridden), name=f"{stage}:{c.name}",
            severity="error" if c.blocking else "warn",
            expected=None if c.threshold is None else str(to_jsonable(c.threshold)),
            actual=None if c.observed is None else str(to_jsonable(c.observed)),
            description=c.detail or None,
        ) for stage, c in checks],
        producer=PRODUCER)}


def _event(kind: str, job: LineageJob, run_id: str, at: datetime, run_facets: dict[str, Any],
           inputs: list[Any], outputs: list[Any]) -> RunEvent:
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.generated.job_type_job import JobTypeJobFacet

    return RunEvent(
        eventType=RunState[kind], eventTime=_time(at), producer=PRODUCER,
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=job.namespace, name=job.name, facets={"jobType": JobTypeJobFacet(
            processingType="BATCH", integration="DIFFCDC", jobType="TABLE", producer=PRODUCER)}),
        inputs=inputs, outputs=outputs,
    )


def _input(job: LineageJob, facets: dict[str, Any] | None = None,
           input_facets: dict[str, Any] | None = None) -> Any:
    from openlineage.client.event_v2 import InputDataset

    return InputDataset(namespace=job.source.namespace, name=job.source.name,
                        facets=facets or {}, inputFacets=input_facets or {})


def start_event(job: LineageJob, run_id: str, at: datetime, snapshot_id: str | None) -> RunEvent:
    """A version's run begins (``snapshot_id`` None: the table's run, no version known yet)."""
    from openlineage.client.event_v2 import OutputDataset

    run_facet, _ = _facets()
    return _event("START", job, run_id, at,
                  {"diffcdc": run_facet(table=job.name, snapshotId=snapshot_id,
                                        producer=PRODUCER)},
                  [_input(job)],
                  [OutputDataset(namespace=s.dataset.namespace, name=s.dataset.name)
                   for s in job.sinks])


def complete_event(job: LineageJob, run_id: str, at: datetime, version: VersionFacts,
                   schema: Mapping[str, Any] | None) -> RunEvent:
    """A version is committed (and published to the sinks that could): its schema, the gate's
    checks on the input, the rows each sink got."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )

    run_facet, changes_facet = _facets()
    published = {s.sink: s.published for s in version.sinks}
    changed = version.inserted + version.updated + version.deleted
    outputs = []
    for sink in job.sinks:
        facets: dict[str, Any] = {"diffcdc": changes_facet(
            inserted=version.inserted, updated=version.updated, deleted=version.deleted,
            published=published.get(sink.sink, False), producer=PRODUCER)}
        if published.get(sink.sink):
            facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
                rowCount=changed, producer=PRODUCER)
        outputs.append(OutputDataset(namespace=sink.dataset.namespace, name=sink.dataset.name,
                                     facets=_schema_facet(schema), outputFacets=facets))
    return _event("COMPLETE", job, run_id, at,
                  {"diffcdc": run_facet(table=job.name, snapshotId=version.snapshot_id,
                                        version=version.version, exitClass="ok",
                                        producer=PRODUCER)},
                  [_input(job, _schema_facet(schema), _assertions(version.gate))], outputs)


def fail_event(job: LineageJob, run_id: str, at: datetime, facts: TableFacts,
               snapshot_id: str | None) -> RunEvent:
    """The table failed before its version (``snapshot_id``, None: before any) was done: the
    error, and the gate's checks when the gate refused the snapshot."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.generated.error_message_run import ErrorMessageRunFacet

    run_facet, _ = _facets()
    facets: dict[str, Any] = {"diffcdc": run_facet(
        table=job.name, snapshotId=snapshot_id, exitClass=exit_class(facts.exit_code or 1),
        producer=PRODUCER)}
    if facts.error:
        facets["errorMessage"] = ErrorMessageRunFacet(
            message=facts.error, programmingLanguage="python", producer=PRODUCER)
    return _event("FAIL", job, run_id, at, facets,
                  [_input(job, input_facets=_assertions(facts.refused_gate))],
                  [OutputDataset(namespace=s.dataset.namespace, name=s.dataset.name)
                   for s in job.sinks])


def abort_event(job: LineageJob, run_id: str, at: datetime, snapshot_id: str | None) -> RunEvent:
    """The run stopped abnormally (interrupted, or ended by an unexpected error) before its
    table's outcome was known."""
    return _bare("ABORT", job, run_id, at, snapshot_id, None)


def unchanged_event(job: LineageJob, run_id: str, at: datetime,
                    snapshot_id: str | None) -> RunEvent:
    """A snapshot read that made no version (the source handed the last committed snapshot
    again): its run completes with nothing written."""
    return _bare("COMPLETE", job, run_id, at, snapshot_id, "ok")


def _bare(kind: str, job: LineageJob, run_id: str, at: datetime, snapshot_id: str | None,
          exit_name: str | None) -> RunEvent:
    from openlineage.client.event_v2 import OutputDataset

    run_facet, _ = _facets()
    return _event(kind, job, run_id, at,
                  {"diffcdc": run_facet(table=job.name, snapshotId=snapshot_id,
                                        exitClass=exit_name, producer=PRODUCER)},
                  [_input(job)],
                  [OutputDataset(namespace=s.dataset.namespace, name=s.dataset.name)
                   for s in job.sinks])


def new_run_id() -> str:
    """A run id: a UUID v7 (time-ordered) from the client."""
    from openlineage.client.uuid import generate_new_uuid

    return str(generate_new_uuid())


# -- sending (the IO edge) -----------------------------------------------------------------


def configured_elsewhere() -> bool:
    """Whether the OpenLineage client is configured outside diffcdc's config: its environment
    variables or an ``openlineage.yml`` where the client looks for one."""
    if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if os.environ.get("OPENLINEAGE_URL") or os.environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ):
        return True
    return any(os.path.isfile(p) for p in (
        os.path.join(os.getcwd(), "openlineage.yml"),
        os.path.join(os.path.expanduser("~/.openlineage"), "openlineage.yml")))


def _client_config(settings: LineageSettings) -> dict[str, Any] | None:
    """The client's configuration from ``[lineage]`` (None: its own configuration)."""
    if settings.url is None:
        return None
    transport: dict[str, Any] = {
        "type": "http", "url": settings.url, "endpoint": settings.endpoint,
        "timeout": settings.timeout, "retry": {"total": 0},  # one try: never a run's delay
    }
    if settings.api_key_env:
        transport["auth"] = {"type": "api_key", "apiKey": os.environ[settings.api_key_env]}
    return {"transport": transport}


class _Heard(logging.Handler):
    """The OpenLineage client's own complaints while it is made (an unreadable openlineage.yml
    is logged with a traceback, then it falls back to printing events nowhere visible)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.problem: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.problem is None:
            self.problem = record.getMessage()


def _refuse_redirects(transport: Any) -> None:
    """An HTTP receiver's redirect fails the event instead of being followed: requests turns
    a POST answered 301/302/303 into a GET of the new address, so the event would be dropped
    with a success (a proxy sending http:// on to https:// loses every event, unseen)."""
    from requests import Session

    session = getattr(transport, "session", None)
    if isinstance(session, Session):
        session.hooks["response"].append(_redirect_refused)


def _redirect_refused(response: Any, *args: Any, **kwargs: Any) -> Any:
    from urllib.parse import urlsplit

    from diffcdc.errors import ConfigError

    if response.is_redirect:
        where = urlsplit(response.headers.get("Location") or "")
        raise ConfigError(
            f"the receiver answered {response.status_code}, a redirect to "
            f"{where.scheme + '://' if where.scheme else ''}{where.hostname or ''}{where.path}, "
            "which an event does not follow: give the address it redirects to")
    return response


class LineageEmitter:
    """Sends events in a thread of its own, in order; the first failure is one warning line and
    stops the rest (a receiver that is down costs the run nothing more)."""

    def __init__(self, client: Any, where: str, timeout: float) -> None:
        self.client, self.where, self.timeout = client, where, timeout
        self._queue: queue.Queue[RunEvent | None] = queue.Queue()
        self._failed = False
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._send, name="diffcdc-lineage", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, settings: LineageSettings | None) -> LineageEmitter | None:
        """The emitter ``[lineage]`` or the client's own configuration asks for (None: none;
        one warning line when the client cannot be made)."""
        if settings is None and not configured_elsewhere():
            return None
        where = without_credentials(settings.url if settings is not None and settings.url else
                                    os.environ.get("OPENLINEAGE_URL") or
                                    "the receiver of the OpenLineage client's configuration")
        if settings is not None and settings.api_key_env and \
                not os.environ.get(settings.api_key_env):
            log.warning("OpenLineage events are not sent to %s: the environment variable %s "
                        "([lineage] api_key_env) is not set; the run goes on without them",
                        where, settings.api_key_env)
            return None
        heard = _Heard()
        client_log = logging.getLogger("openlineage")
        client_log.addHandler(heard)
        propagate, client_log.propagate = client_log.propagate, False  # its tracebacks: ours
        try:
            from openlineage.client import OpenLineageClient

            client = OpenLineageClient(config=_client_config(settings) if settings else None)
            if client.transport.kind == "console" and heard.problem:
                raise ValueError(heard.problem)  # its configuration unreadable: no events
            _refuse_redirects(client.transport)
        except Exception as exc:  # noqa: BLE001 - its library, its configuration: one line
            log.warning("OpenLineage events are not sent (%s: %s); the run goes on without "
                        "them: %s", where, without_credentials(exc)[:200],
                        "pip install 'diffcdc[lineage]'" if isinstance(exc, ImportError) else
                        "check [lineage] or the OpenLineage client's configuration")
            return None
        finally:
            client_log.removeHandler(heard)
            client_log.propagate = propagate
        return cls(client, where, settings.timeout if settings else DEFAULT_TIMEOUT)

    def emit(self, event: RunEvent) -> None:
        if not self._failed:
            self._queue.put(event)

    def _send(self) -> None:
        while (event := self._queue.get()) is not None:
            if self._failed:
                continue
            try:
                self.client.emit(event)
            except Exception as exc:  # noqa: BLE001 - the receiver's trouble, never the run's
                self._warn_once(
                    "OpenLineage events could not be sent to %s (%s); the run's result stands, "
                    "its later events are dropped: check the receiver and [lineage] url",
                    self.where, without_credentials(exc)[:200])

    def _warn_once(self, text: str, *values: Any) -> None:
        with self._lock:
            if self._failed:
                return
            self._failed = True
        log.warning(text, *values)

    def close(self) -> None:
        """Wait (at most the timeout) for the events still queued; one warning line when they
        are not all sent by then (once: a second close does not wait again)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            self._warn_once("OpenLineage events were not all sent to %s within %g s; the run's "
                            "result stands: check the receiver and [lineage] timeout",
                            self.where, self.timeout)


def now() -> datetime:
    return datetime.now(timezone.utc)
