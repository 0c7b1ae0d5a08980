"""The quality gate's share of a diffcdc run (issue target: at most 30% of run time).

The built-in checks (key presence, NULL and duplicate keys, row-count and delete ratios) are
computed by the same Spark pass that fingerprints and diffs the snapshot, so they are timed by
comparing a run with the gate switched off as far as it goes (ratios off) against the default
gate; user great-expectations expectations cost a scan of their own and are timed directly
(``gate_seconds`` in the run report).

    python -m benchmarks.gate_share --rows 1000000 [--out benchmarks/results/gate-share.json]
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .diffcdc_runner import steady_runs
from .generate import Rates, generate
from .report import print_and_save

EXPECTATIONS = [
    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "customer_id"}},
    {"type": "expect_column_values_to_be_between",
     "kwargs": {"column": "quantity", "min_value": 0, "max_value": 1_000_000}},
    {"type": "expect_column_value_lengths_to_be_between",
     "kwargs": {"column": "name", "min_value": 0, "max_value": 200}},
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from diffcdc.core.quality_config import QualityConfig
    from diffcdc.spark.session import build_spark

    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "data", f"gate-n{args.rows}")
    generate(data, args.rows, rates=Rates())
    work = os.path.join(here, "work", "gate-share")
    spark = build_spark()
    variants = {
        "minimal (ratios off)": QualityConfig(min_row_ratio=None, max_row_ratio=None, max_delete_ratio=None),
        "default built-in checks": QualityConfig(),
        "built-ins + 3 GX expectations": QualityConfig(expectations=EXPECTATIONS),
    }
    runs = {
        name: steady_runs(spark, os.path.join(data, "snap-001"), os.path.join(data, "snap-002"),
                          os.path.join(work, str(i)), quality)
        for i, (name, quality) in enumerate(variants.items())
    }
    runs["minimal (ratios off)"]()  # JVM/JIT warm-up
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for _ in range(args.repeat):  # interleaved, so machine noise hits every variant alike
        for name, once in runs.items():
            seconds, report = once()
            gate_seconds = report.snapshots[0].gate_seconds
            results[name].append({"seconds": round(seconds, 3), "gate_seconds": gate_seconds})
    summary = {}
    base = min(r["seconds"] for r in results["minimal (ratios off)"])
    for name, runs in results.items():
        best = min(runs, key=lambda r: r["seconds"])
        summary[name] = {
            "best_seconds": best["seconds"],
            "gate_seconds": best["gate_seconds"],
            "gate_share_direct": round(best["gate_seconds"] / best["seconds"], 3),
            "extra_vs_minimal_share": round(max(best["seconds"] - base, 0.0) / best["seconds"], 3),
            "runs": runs,
        }
    doc = {"rows": args.rows, "repeat": args.repeat, "variants": summary,
           "command": f"python -m benchmarks.gate_share --rows {args.rows} --repeat {args.repeat}"}
    print_and_save(doc, args.out, indent=1)


if __name__ == "__main__":
    main()
