"""Hand-written encoders against libraries that do the same job, on one core.

Two comparisons, each timed in this process, the two sides in turn (A B A B ...), so every
ratio compares runs made seconds apart on a noisy machine:

* ``avro``: the Kafka sink's message bodies. *diffcdc* is what an executor runs per staged
  Parquet file (:func:`~diffcdc.sinks.kafka.binary.encode_batch` per 65,536-row Arrow batch,
  :class:`~diffcdc.sinks.kafka.container.MessageWriter` cutting container files at the sink's
  default limits and writing them with their SHA-256). *fastavro* is ``fastavro.writer``, the
  library's Object Container File writer, on the same batches turned into Python dicts
  (``to_pylist``, which it needs), writing the same bodies: the same records per body (cut
  where diffcdc cut, a help fastavro would not have alone), one block each, the same sync
  marker and ``diffcdc.columns`` metadata, written and hashed the same way. Its two steps are
  also timed apart (*to_pylist*, *writer*). The change rows are those of
  ``benchmarks.generate.change_rows`` (the generator's ten columns, 70% inserts, 20% updates,
  10% deletes carrying only the key, ``sys_op`` last); both outputs are decoded with
  ``fastavro.reader`` and must give the same records.
* ``snappy``: snappy-compressed text landing files (the Snappy framing format). The CSV text
  of the generator's rows with the row marker (as ``benchmarks.text_encode`` makes it) is
  framed by ``diffcdc.sinks.openmirroring.text_codecs.compress(text, "snappy")`` (whatever
  this tree has) and by ``cramjam.snappy.compress``, and read back by ``decompress`` and
  ``cramjam.snappy.decompress``; each side must decode the other's output. cramjam answers
  with its own buffer object: timed as it is and copied to ``bytes`` (what ``compress`` and
  ``decompress`` return). Raw Snappy over the whole text (``pyarrow.compress``, no framing, no
  CRC) is timed as the floor.

Run it on one core (``taskset -c 0``)::

    taskset -c 0 python -m benchmarks.avro_encode --rows 1000000 --repeat 5 [--parts avro,snappy] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .generate import change_rows, make_rows
from .report import print_and_save


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def _summary(seconds: list[float]) -> dict[str, Any]:
    return {"seconds": [round(s, 3) for s in seconds], "min": round(min(seconds), 3),
            "median": round(statistics.median(seconds), 3)}


def _pairs(name_a: str, a: list[float], name_b: str, b: list[float]) -> dict[str, Any]:
    """``b / a`` run by run (A and B ran in turn), min and median."""
    ratios = [y / x for x, y in zip(a, b)]
    return {"of": f"{name_b} / {name_a}", "min": round(min(ratios), 2),
            "median": round(statistics.median(ratios), 2)}


def _alternate(repeat: int, sides: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeat):
        for name, fn in sides.items():
            seconds[name].append(_timed(fn)[0])
    return seconds


# -- Avro container files ------------------------------------------------------------------------

def avro_part(rows: int, repeat: int) -> dict[str, Any]:
    import fastavro

    from diffcdc.core.arrow_types import spark_schema
    from diffcdc.core.changeset import OP, OP_DELETE
    from diffcdc.sinks.kafka.binary import encode_batch
    from diffcdc.sinks.kafka.config import KafkaSinkConfig
    from diffcdc.sinks.kafka.container import MessageWriter, container_header, sync_marker
    from diffcdc.sinks.kafka.schema import avro_layout
    from diffcdc.sinks.kafka.stage import BATCH_ROWS

    changes = change_rows(rows, seed=42)
    ops = changes.column(OP).to_numpy()
    data = changes.drop([OP])
    layout = avro_layout(spark_schema(data.schema), ("id",), "orders", logical=True, table="orders")
    sys_op = pa.array((ops == OP_DELETE).astype(np.int32))
    names = [f["name"] for f in layout.schema["fields"]]
    table = pa.Table.from_arrays([*data.columns, sys_op], names=names).combine_chunks()
    batches = table.to_batches(max_chunksize=BATCH_ROWS)
    limits = KafkaSinkConfig.model_fields
    max_records = limits["max_records_per_message"].default
    max_bytes = limits["max_message_bytes"].default
    sync = sync_marker("orders", 1)
    header = container_header(layout.schema, layout.columns, sync)
    parsed = fastavro.parse_schema(layout.schema)
    columns_meta = {"diffcdc.columns": header_columns(layout.columns)}
    work = tempfile.mkdtemp(prefix="avro-encode-")
    cuts: list[int] = []

    def ours() -> list[str]:
        folder = _fresh(work, "diffcdc")
        writer = MessageWriter(folder, header, sync, max_records, max_bytes)
        for batch in batches:
            writer.add(*encode_batch(list(batch.columns), layout.plans))
        writer.flush()
        cuts[:] = [w.records for w in writer.written]
        return [w.path for w in writer.written]

    split = {"to_pylist": 0.0, "writer": 0.0}

    def theirs() -> list[str]:
        folder = _fresh(work, "fastavro")
        paths: list[str] = []
        pending: list[dict[str, Any]] = []
        todo = iter(cuts)
        want = next(todo, 0)
        for batch in batches:
            seconds, records = _timed(batch.to_pylist)
            split["to_pylist"] += seconds
            pending.extend(records)
            while want and len(pending) >= want:
                body, pending = pending[:want], pending[want:]
                started = time.perf_counter()
                buffer = io.BytesIO()
                fastavro.writer(buffer, parsed, body, codec="null", sync_interval=max_bytes,
                                metadata=columns_meta, sync_marker=sync)
                raw = buffer.getvalue()
                path = os.path.join(folder, f"{uuid.uuid4().hex}.avro")
                with open(path, "wb") as out:
                    out.write(raw)
                hashlib.sha256(raw).hexdigest()
                split["writer"] += time.perf_counter() - started
                paths.append(path)
                want = next(todo, 0)
        return paths

    try:
        ours_paths = ours()
        theirs_paths = theirs()
        same = _same_records(fastavro, ours_paths, theirs_paths)
        body_bytes = {
            name: sum(os.path.getsize(p) for p in paths)
            for name, paths in (("diffcdc", ours_paths), ("fastavro", theirs_paths))
        }
        split.update(to_pylist=0.0, writer=0.0)
        seconds: dict[str, list[float]] = {"diffcdc": [], "fastavro": []}
        steps: dict[str, list[float]] = {"to_pylist": [], "writer": []}
        for _ in range(repeat):
            seconds["diffcdc"].append(_timed(ours)[0])
            split.update(to_pylist=0.0, writer=0.0)
            seconds["fastavro"].append(_timed(theirs)[0])
            for step in steps:
                steps[step].append(split[step])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rows": table.num_rows, "messages": len(cuts), "max_records": max_records,
        "max_bytes": max_bytes, "batch_rows": BATCH_ROWS, "body_bytes": body_bytes,
        "same_records": same,
        "diffcdc": _summary(seconds["diffcdc"]), "fastavro": _summary(seconds["fastavro"]),
        "fastavro_steps": {step: _summary(s) for step, s in steps.items()},
        "ratio": _pairs("diffcdc", seconds["diffcdc"], "fastavro", seconds["fastavro"]),
        "ratio_writer_alone": _pairs("diffcdc", seconds["diffcdc"], "fastavro writer",
                                     steps["writer"]),
    }


def header_columns(columns: list[str]) -> str:
    """``diffcdc.columns`` as :func:`~diffcdc.sinks.kafka.container.container_header` spells it."""
    import json

    return json.dumps(columns, ensure_ascii=False, separators=(",", ":"))


def _fresh(work: str, name: str) -> str:
    folder = os.path.join(work, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return folder


def _same_records(fastavro: Any, ours: list[str], theirs: list[str]) -> bool:
    """Both sets of bodies decode, body by body, to the same records and metadata."""
    if len(ours) != len(theirs):
        raise SystemExit(f"{len(ours)} bodies from diffcdc, {len(theirs)} from fastavro")
    for a, b in zip(ours, theirs):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            ra, rb = fastavro.reader(fa), fastavro.reader(fb)
            if ra.metadata["diffcdc.columns"] != rb.metadata["diffcdc.columns"]:
                raise SystemExit(f"other metadata in {a} and {b}")
            if list(ra) != list(rb):
                raise SystemExit(f"other records in {a} and {b}")
    return True


# -- Snappy framing ------------------------------------------------------------------------------

def snappy_part(rows: int, repeat: int) -> dict[str, Any]:
    import cramjam

    from diffcdc.sinks.openmirroring.text import TextFormat
    from diffcdc.sinks.openmirroring.text_codecs import compress, decompress
    from diffcdc.sinks.openmirroring.text_encode import encode_table

    table = make_rows(np.arange(1, rows + 1, dtype=np.int64), np.random.default_rng(42))
    table = table.append_column("__rowMarker__", pa.array(np.zeros(rows, np.int32)))
    text = encode_table(TextFormat("csv"), table)

    ours_framed, theirs_framed = compress(text, "snappy"), bytes(cramjam.snappy.compress(text))
    for name, framed in (("diffcdc", ours_framed), ("cramjam", theirs_framed)):
        if decompress(framed) != text or bytes(cramjam.snappy.decompress(framed)) != text:
            raise SystemExit(f"the {name} framing does not decode back to the text")
    packed = _alternate(repeat, {
        "diffcdc": lambda: compress(text, "snappy"),
        "cramjam": lambda: cramjam.snappy.compress(text),
        "cramjam as bytes": lambda: bytes(cramjam.snappy.compress(text)),
        "raw snappy": lambda: pa.compress(text, codec="snappy", asbytes=True),
    })
    unpacked = _alternate(repeat, {
        "diffcdc": lambda: decompress(ours_framed),
        "cramjam": lambda: cramjam.snappy.decompress(ours_framed),
        "cramjam as bytes": lambda: bytes(cramjam.snappy.decompress(ours_framed)),
    })
    return {
        "text_bytes": len(text), "framed_bytes": {"diffcdc": len(ours_framed),
                                                  "cramjam": len(theirs_framed)},
        "identical_bytes": ours_framed == theirs_framed,
        "compress": {name: _summary(s) for name, s in packed.items()},
        "compress_ratio": _pairs("diffcdc", packed["diffcdc"], "cramjam", packed["cramjam"]),
        "compress_ratio_as_bytes": _pairs("diffcdc", packed["diffcdc"], "cramjam as bytes",
                                          packed["cramjam as bytes"]),
        "decompress": {name: _summary(s) for name, s in unpacked.items()},
        "decompress_ratio": _pairs("diffcdc", unpacked["diffcdc"], "cramjam", unpacked["cramjam"]),
        "decompress_ratio_as_bytes": _pairs("diffcdc", unpacked["diffcdc"], "cramjam as bytes",
                                            unpacked["cramjam as bytes"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--parts", default="avro,snappy")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    here = os.path.dirname(os.path.abspath(__file__))
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=here, check=False).stdout.strip()
    import cramjam
    import fastavro

    document: dict[str, Any] = {
        "command": f"taskset -c 0 python -m benchmarks.avro_encode --rows {args.rows} "
                   f"--repeat {args.repeat} --parts {args.parts}",
        "revision": revision, "cpus": sorted(os.sched_getaffinity(0)),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": {"python": platform.python_version(), "fastavro": fastavro.__version__,
                     "cramjam": cramjam.__version__, "pyarrow": pa.__version__,
                     "numpy": np.__version__},
    }
    if "avro" in parts:
        document["avro"] = avro_part(args.rows, args.repeat)
    if "snappy" in parts:
        document["snappy"] = snappy_part(args.rows, args.repeat)
    document["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print_and_save(document, args.out)


if __name__ == "__main__":
    main()
