"""A ``diffcdc run`` subprocess killed (``kill -9``, :mod:`diffcdc.faults`) at a named point."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from tests.support.config_text import table_toml


def killed_at(table: Any, state: str, root: str, point: str,
              fields: dict[str, Any] | None = None) -> None:
    """Run ``table`` (a :class:`diffcdc.config.TableConfig`, written as ``root/diffcdc.toml``
    with the further table ``fields``) under ``state`` in a subprocess that dies at ``point``
    (``DIFFCDC_CRASH_AT``); fails unless it died there."""
    config = os.path.join(root, "diffcdc.toml")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(table_toml(table, state, fields=fields))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["DIFFCDC_CRASH_AT"] = point
    crashed = subprocess.run(
        [sys.executable, "-m", "diffcdc.cli", "run", "--quiet", "--config", config,
         "--master", "local[1]"], env=env, capture_output=True, text=True, timeout=300,
        check=False)
    assert crashed.returncode == 137, crashed.stderr[-2000:]
