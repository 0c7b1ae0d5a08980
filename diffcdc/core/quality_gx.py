"""User expectations of the quality gate, run with great-expectations 1.x on a Spark DataFrame.

great_expectations is imported only when a table has expectations (the import takes seconds).
Each run builds a fresh in-memory (ephemeral) context: no analytics, no progress bars, no
files, except Data Docs HTML in ``data_docs_dir`` when that is set.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from diffcdc.core.quality_config import BUILTIN_CHECKS, QualityConfig
from diffcdc.core.quality_report import SAMPLE_SIZE, CheckResult, to_jsonable
from diffcdc.errors import ConfigError, DiffcdcError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: GX keeps one process-wide "current" context: validations run one at a time.
_GX_LOCK = threading.Lock()
_COLUMN_KWARGS = ("column", "column_A", "column_B", "column_list")
_NAME_META = "diffcdc_check"


@dataclass(frozen=True)
class PlannedExpectation:
    """One user expectation with the check name and blocking flag the gate reports."""

    name: str
    blocking: bool
    config: dict[str, Any] = field(default_factory=dict)
    """``type``, ``kwargs``, ``meta`` and ``severity`` as GX reads them."""
    source: str | None = None
    """The suite file it came from, or ``None`` for the diffcdc config."""


@dataclass(frozen=True)
class Suite:
    """The content of an ExpectationSuite JSON file (GX 1.x, or 0.x with ``expectation_type``
    keys), read at the edge (:func:`diffcdc.engine.gate.read_suite`)."""

    name: str
    expectations: tuple[dict[str, Any], ...]
    path: str
    """The file it was read from (named in errors and results)."""


def parse_suite(text: str, path: str) -> Suite:
    """The suite in ``text``, the content of the file at ``path``; a ConfigError names the file."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"expectation suite is not valid JSON: {exc}", path=path) from exc
    if not isinstance(data, dict) or not isinstance(data.get("expectations"), list):
        raise ConfigError("expectation suite has no 'expectations' list", path=path)
    expectations = []
    for i, exp in enumerate(data["expectations"]):
        if not isinstance(exp, dict):
            raise ConfigError(f"expectation #{i + 1} is not an object", path=path)
        exp = dict(exp)
        if "type" not in exp and "expectation_type" in exp:  # GX 0.x suites
            exp["type"] = exp.pop("expectation_type")
        if not isinstance(exp.get("type"), str):
            raise ConfigError(f"expectation #{i + 1} has no 'type'", path=path)
        expectations.append(exp)
    name = data.get("name") or data.get("expectation_suite_name") or PurePath(path).stem
    return Suite(str(name), tuple(expectations), path)


def planned_expectations(cfg: QualityConfig, suite: Suite | None = None) -> list[PlannedExpectation]:
    """The user expectations of ``cfg`` (config first, then its suite file's, ``suite``), with
    unique names."""
    plans: list[PlannedExpectation] = []
    seen: set[str] = set(BUILTIN_CHECKS)

    def unique(explicit: str | None, config: dict[str, Any]) -> str:
        if explicit:
            if explicit in seen:
                raise ConfigError(f"expectation name {explicit!r} is used twice or is built in")
            seen.add(explicit)
            return explicit
        base = _derived_name(config)
        name, n = base, 1
        while name in seen:
            n += 1
            name = f"{base}#{n}"
        seen.add(name)
        return name

    for spec in cfg.expectations:
        config = {"type": spec.type, "kwargs": dict(spec.kwargs)}
        plans.append(PlannedExpectation(unique(spec.name, config), spec.blocking, config))
    if cfg.expectation_suite:
        if suite is None:
            raise DiffcdcError(f"the expectation suite {cfg.expectation_suite} was not read "
                               "before its checks were planned (a bug in diffcdc: please "
                               "report it)")
        for exp in suite.expectations:
            meta = exp.get("meta") or {}
            severity = str(exp.get("severity") or "critical").lower()
            blocking = cfg.suite_blocking and severity == "critical" and (
                meta.get("blocking", True) is not False)
            config = {k: exp[k] for k in ("type", "kwargs", "meta", "severity", "notes")
                      if exp.get(k) is not None}
            plans.append(PlannedExpectation(
                unique(meta.get(_NAME_META), config), blocking, config, suite.path
            ))
    return plans


def run_expectations(
    df: DataFrame,
    *,
    cfg: QualityConfig,
    suite: Suite | None,
    keys: Sequence[str],
    overrides: Collection[str],
    table: str | None = None,
    snapshot: str | None = None,
) -> list[CheckResult]:
    """Validate ``df`` against the user expectations of ``cfg`` and ``suite`` (the content of
    its suite file); one result per expectation."""
    plans = planned_expectations(cfg, suite)
    if not plans:
        return []
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    expectations = [_build(p) for p in plans]
    result_format: dict[str, Any] = {"result_format": "SUMMARY",
                                     "partial_unexpected_count": SAMPLE_SIZE}
    if keys:
        result_format["unexpected_index_column_names"] = list(keys)
    label = _safe(f"{table or 'table'}")
    with _GX_LOCK:
        ctx = _ephemeral_context(cfg.data_docs_dir)
        asset = ctx.data_sources.add_spark(name="diffcdc", persist=False).add_dataframe_asset(
            name=label)
        batch_def = asset.add_batch_definition_whole_dataframe("snapshot")
        suite = ctx.suites.add(gx.ExpectationSuite(name=label, expectations=expectations))
        validation = ctx.validation_definitions.add(
            gx.ValidationDefinition(name=label, data=batch_def, suite=suite))
        actions = [gx.checkpoint.UpdateDataDocsAction(name="docs")] if cfg.data_docs_dir else []
        checkpoint = ctx.checkpoints.add(gx.Checkpoint(
            name=label, validation_definitions=[validation], actions=actions,
            result_format=result_format))
        run = checkpoint.run(batch_parameters={"dataframe": df},
                             run_id=RunIdentifier(run_name=_safe(snapshot or "snapshot")))
    (validation_result,) = run.run_results.values()
    by_name = {res.expectation_config.meta[_NAME_META]: res for res in validation_result.results}
    return [_check_result(p, by_name[p.name], keys, overrides) for p in plans]


def _build(plan: PlannedExpectation) -> Any:
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    config = dict(plan.config)
    config["meta"] = {**(config.get("meta") or {}), _NAME_META: plan.name}
    try:
        return ExpectationConfiguration(**config).to_domain_obj()
    except Exception as exc:  # GX raises many types for an unknown type or bad kwargs
        message = " ".join(str(exc).split())[:300]
        raise ConfigError(f"invalid expectation {plan.name!r}: {message}",
                          path=plan.source) from exc


def _check_result(plan: PlannedExpectation, res: Any, keys: Sequence[str],
                  overrides: Collection[str]) -> CheckResult:
    result = res.result or {}
    error = _exception_message(res.exception_info)
    if error:
        observed: Any = f"error: {error}"
    elif "observed_value" in result:
        observed = result["observed_value"]
    else:
        observed = result.get("unexpected_count")
    samples = [{k: row.get(k) for k in keys if k in row}
               for row in result.get("partial_unexpected_index_list") or []
               if isinstance(row, dict)]
    kwargs = res.expectation_config.kwargs
    threshold = {k: v for k, v in kwargs.items() if k not in (*_COLUMN_KWARGS, "batch_id")}
    detail = ""
    if result.get("unexpected_percent") is not None:
        detail = f"{result['unexpected_percent']:.4g}% of rows unexpected"
    return CheckResult(
        name=plan.name,
        passed=bool(res.success),
        blocking=plan.blocking,
        observed=to_jsonable(observed),
        threshold=to_jsonable(threshold) or None,
        sample_keys=to_jsonable([s for s in samples if s][:SAMPLE_SIZE]),
        overridden=plan.name in overrides,
        detail=detail,
    )


def _exception_message(info: Any) -> str | None:
    if not isinstance(info, dict):
        return None
    if "raised_exception" in info:
        if not info.get("raised_exception"):
            return None
        message = " ".join(str(info.get("exception_message") or "exception").split())
        return re.sub(r"^Error:\s*", "", message)[:200]
    for nested in info.values():  # keyed by metric when several metrics failed
        message = _exception_message(nested)
        if message:
            return message
    return None


def _ephemeral_context(data_docs_dir: str | None) -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites = {}
    if data_docs_dir:
        sites["diffcdc"] = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(Path(data_docs_dir).resolve())},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        data_docs_sites=sites,
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _derived_name(config: dict[str, Any]) -> str:
    kwargs = config.get("kwargs") or {}
    cols: list[str] = []
    for key in _COLUMN_KWARGS:
        value = kwargs.get(key)
        if isinstance(value, str):
            cols.append(value)
        elif isinstance(value, list):
            cols.extend(str(v) for v in value)
    return config["type"] + (":" + ",".join(cols) if cols else "")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:100] or "x"
