"""A config of three tables run three times through the CLI, for ``diffcdc report``'s tests:
several versions per table, a quality gate refusal and then its override, a Delta sink (with
a changelog, so changed-column lists exist) left with a backlog by a failed publish.

Orders (open_mirroring + delta with changelog_path): run 1 commits 1-2, run 2 commits 3,
run 3 commits 4 and its Delta publish fails (the delta sink's backlog: version 4).
Customers (max_delete_ratio 0.3): run 1 commits 1-2, run 2's snapshot 3 deletes half the rows
and is refused (exit 3), run 3 lets it pass with ``--override-check Customers:delete_ratio``.
Items: run 1 commits 1, run 2 commits 2, run 3 has nothing to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cli_runs import write

CONFIG = """\
[diffcdc]
state = "state"
landing = "landing"

[quality]
min_row_ratio = 0.0
max_delete_ratio = 1.0

[tables.Orders]
source = "src/orders"
keys = ["id"]

[[tables.Orders.sinks]]
type = "open_mirroring"

[[tables.Orders.sinks]]
type = "delta"
path = "lake/orders"
changelog_path = "lake/orders_changes"

[tables.Customers]
source = "src/customers"
keys = ["id"]
quality = { max_delete_ratio = 0.3, min_rows_for_ratios = 1 }

[tables.Items]
source = "src/items"
keys = ["id"]
"""


@dataclass(frozen=True)
class ReportState:
    """The config file, its folder and each run's exit code."""

    config: Path
    base: Path
    exits: tuple[int, ...]


def _orders(step: int) -> list[dict[str, Any]]:
    rows = {i: {"id": i, "name": f"n{i}", "price": 10 * i, "status": "new"} for i in range(10)}
    if step >= 2:
        for i in (0, 1, 2):
            rows[i]["price"] += 1
        rows[3]["status"] = "paid"
        del rows[9]
        rows[10] = {"id": 10, "name": "n10", "price": 100, "status": "new"}
    if step >= 3:
        for i in (4, 5):
            rows[i]["price"] += 2
        rows[6]["name"] = "renamed"
    if step >= 4:
        rows[7]["price"] += 3
    return list(rows.values())


def _customers(step: int) -> list[dict[str, Any]]:
    rows = [{"id": i, "name": f"c{i}", "city": "Oslo"} for i in range(10)]
    if step >= 2:
        rows[1]["city"] = rows[2]["city"] = "Bergen"
    return rows[:5] if step >= 3 else rows


def _items(step: int) -> list[dict[str, Any]]:
    return [{"id": i, "qty": i + (5 if step >= 2 and i == 0 else 0)} for i in range(5)]


def _snapshots(base: Path, table: str, make: Any, steps: range) -> None:
    for step in steps:
        write(str(base / "src" / table / f"{step:04d}.parquet"), make(step))


def build(base: Path, main: Any, monkeypatch: Any) -> ReportState:
    """Write the config under ``base`` and run it three times (in this process, with the
    session's Spark): returns the exit codes (0, 3, 1)."""
    from diffcdc.errors import StorageError
    from diffcdc.sinks.delta.sink import DeltaSink

    config = base / "diffcdc.toml"
    config.write_text(CONFIG, encoding="utf-8")
    os.makedirs(base / "src", exist_ok=True)
    run = ["run", "--config", str(config), "--quiet"]
    exits = []
    _snapshots(base, "orders", _orders, range(1, 3))
    _snapshots(base, "customers", _customers, range(1, 3))
    _snapshots(base, "items", _items, range(1, 2))
    exits.append(main(run))
    _snapshots(base, "orders", _orders, range(3, 4))
    _snapshots(base, "customers", _customers, range(3, 4))
    _snapshots(base, "items", _items, range(2, 3))
    exits.append(main(run))
    _snapshots(base, "orders", _orders, range(4, 5))

    def down(self: Any, *args: Any, **kwargs: Any) -> None:
        raise StorageError("the Delta store is down (injected by the test)",
                           hint="run again when it is back")

    with monkeypatch.context() as patch:
        patch.setattr(DeltaSink, "publish", down)
        exits.append(main([*run, "--override-check", "Customers:delete_ratio"]))
    return ReportState(config, base, tuple(exits))
