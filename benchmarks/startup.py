"""JVM start-up with and without diffcdc's class-data-sharing archive (``diffcdc.cds``).

Each sample is a fresh Python process that builds diffcdc's SparkSession and runs one tiny
job, timed from the process's first line; with and without the archive alternate, so machine
noise hits both alike. The archive is built first (``python -m diffcdc.cds``) if missing.

    python -m benchmarks.startup [--repeat 5] [--out benchmarks/results/startup.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from .report import print_and_save

_SAMPLE = (
    "import time; t0 = time.perf_counter()\n"
    "from diffcdc.spark.session import build_spark\n"
    "build_spark('local[2]').range(10).count()\n"
    "print(round(time.perf_counter() - t0, 3))\n"
)


def sample(cds: bool) -> float:
    env = {**os.environ, "DIFFCDC_CDS": "1" if cds else "0"}
    done = subprocess.run([sys.executable, "-c", _SAMPLE], env=env, capture_output=True, text=True,
                          check=True, timeout=600)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from diffcdc.cds import build

    archive = build()
    seconds: dict[str, list[float]] = {"without archive": [], "with archive": []}
    for _ in range(args.repeat):
        seconds["without archive"].append(sample(False))
        seconds["with archive"].append(sample(True))
    median = {k: statistics.median(v) for k, v in seconds.items()}
    print_and_save({
        "archive": archive,
        "archive_bytes": os.path.getsize(archive) if archive else None,
        "seconds": seconds,
        "median_seconds": median,
        "with_vs_without": round(median["with archive"] / median["without archive"], 2),
        "load_average_1m": os.getloadavg()[0],
        "command": f"python -m benchmarks.startup --repeat {args.repeat}",
    }, args.out)


if __name__ == "__main__":
    main()
