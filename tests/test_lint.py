"""The tree stays ruff clean (the rule set is in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_clean():
    ruff = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: 'bash .ci/install test' installs it")
    done = subprocess.run(
        [ruff, "check", "--quiet", "diffcdc", "tests", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
