"""Steady runs with the landing zone only, a Delta table only, and both (one diff, two sinks);
and the Delta sink's history mode (``mode = "scd2"``) beside its current mode.

Both sinks should cost well under two separate runs: the snapshot is read, fingerprinted and
diffed once, the change set written once, and each sink only encodes and publishes it. The
history publishes the same change set with one MERGE that also reads the updated keys' open
rows (for their changed columns).

    python -m benchmarks.sinks --rows 1000000 [--repeat 3] [--variants delta history]
                               [--out benchmarks/results/sinks-1m.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from .diffcdc_runner import steady_runs
from .generate import Rates, generate
from .report import print_and_save

VARIANTS = {
    "landing zone": lambda d: [{"type": "open_mirroring", "landing": os.path.join(d, "landing")}],
    "delta": lambda d: [{"type": "delta", "path": os.path.join(d, "lake")}],
    "both": lambda d: [{"type": "open_mirroring", "landing": os.path.join(d, "landing")},
                       {"type": "delta", "path": os.path.join(d, "lake")}],
    "history": lambda d: [{"type": "delta", "path": os.path.join(d, "history"), "mode": "scd2"}],
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args(argv)

    from diffcdc.spark.session import build_spark

    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "data", f"sinks-n{args.rows}")
    generate(data, args.rows, rates=Rates())
    spark = build_spark()  # diffcdc's defaults: local[*], a 2 GiB driver
    result = measure(spark, data, os.path.join(here, "work", "sinks"), args.repeat,
                     args.variants)
    result.update(rows=args.rows,
                  command=f"python -m benchmarks.sinks --rows {args.rows} --repeat {args.repeat}"
                          f" --variants {' '.join(args.variants)}")
    print_and_save(result, args.out)


def measure(spark: Any, data: str, work: str, repeat: int,
            variants: list[str] | None = None) -> dict[str, Any]:
    """Timed steady runs of each variant, interleaved; medians and the ratios between them."""
    from diffcdc.core.quality_config import QualityConfig

    quality = QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None)
    runs = {
        name: steady_runs(spark, os.path.join(data, "snap-001"), os.path.join(data, "snap-002"),
                          os.path.join(work, str(i)), quality, sinks=make)
        for i, (name, make) in enumerate(VARIANTS.items()) if name in (variants or VARIANTS)
    }
    next(iter(runs.values()))()  # JVM/JIT warm-up
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    changes: dict[str, Any] = {}
    for _ in range(repeat):  # interleaved: machine noise hits every variant alike
        for name, once in runs.items():
            took, report = once()
            seconds[name].append(round(took, 3))
            (snap,) = report.snapshots
            changes[name] = {"inserted": snap.inserted, "updated": snap.updated,
                             "deleted": snap.deleted}
    median = {name: statistics.median(v) for name, v in seconds.items()}
    ratios = {}
    if {"both", "landing zone", "delta"} <= set(median):
        ratios["both_vs_two_separate_runs"] = round(
            median["both"] / (median["landing zone"] + median["delta"]), 3)
    if {"history", "delta"} <= set(median):
        ratios["history_vs_delta"] = round(median["history"] / median["delta"], 3)
    return {"seconds": seconds, "median_seconds": median, **ratios, "changes": changes}


if __name__ == "__main__":
    main()
