"""Validating OpenLineage events offline: the spec's OpenLineage.json and the facet schemas
vendored in tests/data/openlineage/ (from github.com/OpenLineage/OpenLineage, spec/, Apache
License 2.0: tests/data/openlineage/NOTICE.md) and diffcdc's own facet schemas
(diffcdc/observe/schemas/), resolved by a referencing Registry (nothing fetched)."""

from __future__ import annotations

import functools
import glob
import json
import os
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "tests", "data", "openlineage")
OURS = os.path.join(ROOT, "diffcdc", "observe", "schemas")


@functools.lru_cache(maxsize=1)
def registry() -> Registry:
    """Every schema by its ``$id``."""
    resources = []
    for path in [os.path.join(SPEC, "OpenLineage.json"),
                 *sorted(glob.glob(os.path.join(SPEC, "facets", "*.json"))),
                 *sorted(glob.glob(os.path.join(OURS, "*.json")))]:
        with open(path, encoding="utf-8") as handle:
            contents = json.load(handle)
        resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


def _validate(document: Any, url: str) -> None:
    """``document`` against the schema at ``url`` (a ``$id`` with a ``#/$defs/...`` pointer)."""
    Draft202012Validator({"$ref": url}, registry=registry(),
                         format_checker=Draft202012Validator.FORMAT_CHECKER).validate(document)


def _facets(event: dict[str, Any]) -> list[dict[str, Any]]:
    """Every facet of an event (run, job, datasets' facets, input and output facets)."""
    groups = [event.get("run", {}).get("facets"), event.get("job", {}).get("facets")]
    for dataset in event.get("inputs", []) + event.get("outputs", []):
        groups += [dataset.get("facets"), dataset.get("inputFacets"),
                   dataset.get("outputFacets")]
    return [facet for group in groups if group for facet in group.values()]


def validate_event(event: dict[str, Any]) -> None:
    """A RunEvent against the spec, and each facet against its own schema (its ``_schemaURL``,
    which must be one of the schemas held here: an unknown facet fails)."""
    _validate(event, event["schemaURL"])
    assert event["schemaURL"].endswith("#/$defs/RunEvent"), event["schemaURL"]
    known = {uri for uri in registry()}
    for facet in _facets(event):
        url = facet["_schemaURL"]
        assert url.split("#")[0] in known, url
        _validate(facet, url)
