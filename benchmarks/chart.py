"""Results JSON -> PNG: time (JVM start-up excluded) and peak memory per scenario and size.

python -m benchmarks.chart benchmarks/results/run-....json
"""

from __future__ import annotations

import json
import os
from typing import Any

from .report import _engine_order

COLORS = {"diffcdc": "#1f77b4", "duckdb": "#ff7f0e", "delta": "#2ca02c", "exceptall": "#d62728"}


def draw(results: dict[str, Any], path: str) -> str:
    """Grouped bars: one column per scenario, rows = wall seconds and peak RSS; returns path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    failed = [r for r in results["runs"] if r["status"] != "ok"]
    runs = [r for r in results["runs"] if r["status"] == "ok"]
    scenarios = [
        s for s in results["meta"].get("scenarios", []) if any(r["scenario"] == s for r in runs)
    ]
    engines = sorted({r["engine"] for r in runs + failed}, key=_engine_order)
    sizes = sorted({r["rows"] for r in runs})
    if not runs:
        return ""
    fig, axes = plt.subplots(2, len(scenarios), figsize=(4.2 * len(scenarios), 7), squeeze=False)
    width = 0.8 / max(len(engines), 1)
    for col, scenario in enumerate(scenarios):
        for row, (metric, label, scale) in enumerate(
            [
                ("seconds", "wall time, s, log scale (JVM start-up excluded)", 1.0),
                ("peak_rss_bytes", "peak RSS of process tree, GiB", 2**30),
            ]
        ):
            ax = axes[row][col]
            for i, engine in enumerate(engines):
                xs, ys = [], []
                for j, rows in enumerate(sizes):
                    match = [
                        r
                        for r in runs
                        if (r["engine"], r["scenario"], r["rows"]) == (engine, scenario, rows)
                    ]
                    if match:
                        xs.append(j + (i - (len(engines) - 1) / 2) * width)
                        ys.append(match[0][metric] / scale)
                bars = ax.bar(
                    xs,
                    ys,
                    width,
                    label=engine if (row, col) == (0, 0) else None,
                    color=COLORS.get(engine),
                )
                if row == 0:
                    ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
                for j, rows in enumerate(sizes):  # runs that did not finish: say why, in place
                    for r in failed:
                        if (r["engine"], r["scenario"], r["rows"]) == (engine, scenario, rows):
                            ax.text(
                                j + (i - (len(engines) - 1) / 2) * width,
                                0.02,
                                r["status"],
                                rotation=90,
                                fontsize=7,
                                ha="center",
                                va="bottom",
                                color=COLORS.get(engine),
                                transform=ax.get_xaxis_transform(),
                            )
            ax.set_xticks(
                range(len(sizes)), [f"{s / 1e6:g}M" if s >= 1e5 else f"{s:,}" for s in sizes]
            )
            ax.set_ylabel(label, fontsize=8)
            if row == 0:
                ax.set_title(scenario)
                ax.set_yscale("log")  # engines differ by orders of magnitude
            ax.grid(axis="y", alpha=0.3)
    fig.legend(loc="upper right", fontsize=8, ncol=len(engines))
    meta = results["meta"]
    fig.suptitle(
        f"snapshot diff, {meta.get('cpus')} CPUs, Spark {meta.get('spark_conf')}, "
        f"isolation={meta.get('isolate')}",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a results JSON of benchmarks.run (the PNG goes beside it)")
    args = parser.parse_args(argv)
    with open(args.results) as handle:
        print(draw(json.load(handle), os.path.splitext(args.results)[0] + ".png"))


if __name__ == "__main__":
    main()
