"""Delimited text landing files: how fast a staged change set becomes CSV text.

Encodes the generator's rows (its 10 columns: integers, strings, a decimal, a double, a
date, a timestamp, a boolean) plus the row marker with ``text_encode.encode_table``, the code an
executor runs per staged part, and reports rows per second and the SHA-256 of the text (equal
digests from two versions of diffcdc mean byte-identical files).

    python -m benchmarks.text_encode --rows 1000000 [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import time

import numpy as np
import pyarrow as pa

from .generate import make_rows
from .report import print_and_save


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from diffcdc.sinks.openmirroring.text import TextFormat
    from diffcdc.sinks.openmirroring.text_encode import encode_table

    here = os.path.dirname(os.path.abspath(__file__))
    table = make_rows(np.arange(1, args.rows + 1, dtype=np.int64), np.random.default_rng(42))
    table = table.append_column("__rowMarker__", pa.array([0] * table.num_rows, pa.int32()))
    results = {}
    for label, subset in [("all columns", table.column_names),
                          ("integers and strings", ["id", "customer_id", "name", "city",
                                                    "__rowMarker__"])]:
        chosen = table.select(subset)
        seconds, digest = [], ""
        for _ in range(args.repeat):
            started = time.perf_counter()
            text = encode_table(TextFormat("csv"), chosen)
            seconds.append(round(time.perf_counter() - started, 3))
            digest = hashlib.sha256(text).hexdigest()
        results[label] = {"columns": subset, "seconds": seconds,
                          "rows_per_second": round(chosen.num_rows / min(seconds)),
                          "bytes": len(text), "sha256": digest}
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=here, check=False).stdout.strip()
    print_and_save({
        "command": f"python -m benchmarks.text_encode --rows {args.rows} --repeat {args.repeat}",
        "revision": revision, "rows": table.num_rows, "results": results,
    }, args.out)


if __name__ == "__main__":
    main()
