"""Single-table ``diffcdc run`` calls in a temp folder: ``src/`` snapshots of (id, v) rows,
``landing/`` and ``state/`` beside them."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq


def write(path: str, rows: list[dict]) -> None:
    """Write ``rows`` as a Parquet file at ``path`` (its folder made)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def rows(n: int, changed: int = 0) -> list[dict]:
    """``n`` rows (id, v); the first ``changed`` of them with a changed ``v``."""
    return [{"id": i, "v": f"v{i}" + ("*" if i < changed else "")} for i in range(n)]


def run_args(base, *extra):
    """The arguments of ``diffcdc run`` for table T from ``base/src`` (``extra`` appended)."""
    return ["run", "--source", str(base / "src"), "--keys", "id", "--table", "T",
            "--landing", str(base / "landing"), "--state", str(base / "state"), *extra]


def one_stderr_line(capsys) -> str:
    """A refused run's error as the user saw it: exactly one line on stderr (a run's own
    errors start with their time, the CLI's with ``diffcdc: error: ``)."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def one_line_error(capsys) -> str:
    """The CLI's error as the user saw it: exactly one line on stderr, ``diffcdc: error: ...``."""
    err = one_stderr_line(capsys)
    assert err.startswith("diffcdc: error: "), err
    return err
