"""diffcdc itself, timed like the baselines.

The source folder given to diffcdc is built from hard links to the generated snapshot files
(no copy): for a steady-state case, the previous snapshot is processed first (untimed, its
time kept as ``setup_seconds``: that is diffcdc's first load), then the current snapshot is
linked in and the timed run processes just that one. For a first load, the timed run
processes the current snapshot against empty state.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .baselines import Case, EngineRun, EngineUnavailable, data_files
from .measure import du, measure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLE = "bench"


def _link_snapshot(src: str, source_root: str, name: str | None = None) -> None:
    """Hard-link a snapshot folder into ``source_root`` under ``name`` (default: its own)."""
    target = os.path.join(source_root, name or os.path.basename(src.rstrip("/")))
    tmp = os.path.join(source_root, "_" + os.path.basename(target))
    os.makedirs(tmp)
    for name in os.listdir(src):
        try:
            os.link(os.path.join(src, name), os.path.join(tmp, name))
        except OSError:
            shutil.copy2(os.path.join(src, name), os.path.join(tmp, name))
    os.rename(tmp, target)  # appears complete, as a real extract should


def _engine() -> tuple[Any, Any]:
    try:
        from diffcdc.config import TableConfig
        from diffcdc.engine.run import run_table
    except ImportError as exc:
        raise EngineUnavailable(
            f"diffcdc.engine.run.run_table is not available yet ({exc}); the benchmark needs the core "
            "engine (issue: core engine). Run the baselines with --engines exceptall,delta,duckdb."
        ) from exc
    return TableConfig, run_table


def run_diffcdc(case: Case, spark: SparkSession) -> EngineRun:
    """One steady-state (or first-load) run of ``diffcdc.engine.run.run_table``."""
    table_config, run_table = _engine()
    source = os.path.join(case.work, "source")
    landing = os.path.join(case.work, "landing")
    state = os.path.join(case.work, "state")
    for path in (source, landing, state):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
    config = table_config(name=TABLE, source=source, keys=[case.key], landing=landing)
    setup = 0.0
    if case.prev:
        _link_snapshot(case.prev, source)
        started = time.perf_counter()
        run_table(spark, config, state)
        setup = time.perf_counter() - started
    _link_snapshot(case.cur, source)
    before = set(data_files(landing))
    with measure() as m:
        report = run_table(spark, config, state)
    files = [f for f in data_files(landing) if f not in before]
    return EngineRun(
        seconds=m.seconds,
        peak_rss_bytes=m.peak_rss_bytes,
        output_files=files,
        state_bytes=du(state),
        output_bytes=sum(map(os.path.getsize, files)),
        setup_seconds=setup,
        rss_before_bytes=m.rss_before_bytes,
        notes={"report": _jsonable(report), "state_latest_bytes": _latest_state_bytes(state)},
    )


def steady_runs(
    spark: SparkSession,
    prev: str,
    cur: str,
    work: str,
    quality: Any = None,
    sinks: Callable[[str], list[dict[str, Any]]] | None = None,
) -> Callable[[], tuple[float, Any]]:
    """A callable doing one complete, timed steady run of ``cur`` after ``prev``.

    The first load of ``prev`` is done once, here (untimed); every call copies its state,
    landing and source folders and runs ``cur`` on the copy, so calls can repeat. Returns
    ``(seconds, report)``. ``sinks(folder)`` gives the table's sinks under a run folder
    (default: one landing zone in ``folder/landing``).
    """
    from diffcdc.engine.run import RunOptions

    table_config, run_table = _engine()
    base = os.path.join(work, "base")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(base, "source"))
    os.symlink(prev, os.path.join(base, "source", "snap-001"))
    def configure(folder: str) -> Any:
        targets = sinks(folder) if sinks else [
            {"type": "open_mirroring", "landing": os.path.join(folder, "landing")}]
        return table_config(name=TABLE, source=os.path.join(folder, "source"), keys=["id"],
                            sinks=targets)

    config = configure(base)
    run_table(spark, config, os.path.join(base, "state"), RunOptions(quality=quality))
    counter = [0]

    def once() -> tuple[float, Any]:
        counter[0] += 1
        run = os.path.join(work, f"run{counter[0]}")
        shutil.copytree(base, run, symlinks=True)
        os.symlink(cur, os.path.join(run, "source", "snap-002"))
        table = configure(run)
        started = time.perf_counter()
        report = run_table(spark, table, os.path.join(run, "state"), RunOptions(quality=quality))
        seconds = time.perf_counter() - started
        shutil.rmtree(run)
        return seconds, report

    return once


def _latest_state_bytes(state_root: str) -> int | None:
    """Bytes of the newest state version's ``state/`` Parquet (older versions kept for rollback
    and any staged landing files excluded); None if the layout is not the expected one."""
    versions = os.path.join(state_root, TABLE, "versions")
    if not os.path.isdir(versions):
        return None
    for name in sorted(os.listdir(versions), reverse=True):
        folder = os.path.join(versions, name, "state")
        if os.path.isdir(folder):
            return du(folder)
    return None


def _jsonable(report: Any) -> Any:
    """Best-effort JSON form of the engine's report (whatever type it turns out to be)."""
    for attr in ("model_dump", "to_dict", "_asdict"):
        if hasattr(report, attr):
            try:
                return getattr(report, attr)()
            except TypeError:
                pass
    if hasattr(report, "__dict__"):
        return {k: v for k, v in vars(report).items() if not k.startswith("_")}
    return report if isinstance(report, (dict, list, str, int, float, type(None))) else repr(report)
