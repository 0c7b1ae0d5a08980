"""The ``[lineage]`` and ``[metrics]`` sections of a config file (docs/lineage.md, docs/metrics.md)."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from diffcdc.core.fields import STRICT_SETTINGS, PathText

#: Seconds an event or a push may take before it is given up (one warning line).
DEFAULT_TIMEOUT = 5.0

_USERINFO = re.compile(r"(?<=//)[^/@\s]*@")


def without_credentials(text: object) -> str:
    """``text`` (a URL, an error naming one) with the user and password of every URL in it
    left out, ``https://***@host``: a warning line is kept in run logs and CI output."""
    return _USERINFO.sub("***@", " ".join(str(text).split()))


class LineageSettings(BaseModel):
    """Where OpenLineage events go; without this section the client's own configuration
    (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, ``openlineage.yml``) applies, if any."""

    model_config = STRICT_SETTINGS

    url: str | None = Field(
        default=None,
        description="The receiver's base URL (events are POSTed to <url>/api/v1/lineage); "
        "default: the OpenLineage client's own configuration.")
    endpoint: str = Field(default="api/v1/lineage", description="The receiver's path.")
    namespace: str = Field(default="diffcdc", min_length=1,
                           description="The jobs' namespace (a job is a diffcdc table).")
    api_key_env: str | None = Field(
        default=None, description="An environment variable holding the receiver's API key "
        "(sent as a bearer token).")
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0, le=300, allow_inf_nan=False,
                           description="Seconds one event may take; a slower or absent "
                           "receiver is one warning line and no more events this run.")


class MetricsSettings(BaseModel):
    """Where a run writes its Prometheus metrics (``--metrics-file`` replaces ``file``)."""

    model_config = STRICT_SETTINGS

    file: PathText | None = Field(
        default=None, description="The Prometheus text file written (atomically) at the end of "
        "every run, e.g. for node-exporter's textfile collector.")
    pushgateway: str | None = Field(
        default=None, description="A Pushgateway URL the same metrics are pushed to.")
    job: str = Field(default="diffcdc", min_length=1, description="The Pushgateway job name.")
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0, le=300, allow_inf_nan=False,
                           description="Seconds the push may take.")
