"""The README's first set-up command works where the system Python refuses ``pip install``.

Debian 12 and Ubuntu 24.04 mark their system interpreter externally managed (PEP 668):
``pip install`` outside a virtual environment fails. ``.ci/install`` must therefore never call
pip on the interpreter itself, only in the project's own environment. This runs the real
script with the system interpreter as ``python3`` and a fresh environment folder.
"""

from __future__ import annotations

import glob
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_PYTHON = "/usr/bin/python3"


def _externally_managed(python: str) -> bool:
    stdlib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    return os.path.exists(os.path.join(stdlib, "EXTERNALLY-MANAGED"))


@pytest.mark.slow
def test_install_uses_a_virtual_environment_with_the_system_python(tmp_path):
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.fail(f"{SYSTEM_PYTHON} is missing: this test needs a Debian/Ubuntu system Python")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").symlink_to(SYSTEM_PYTHON)
    # A pip that would install into the system interpreter fails loudly instead.
    env = {**os.environ, "PATH": f"{shim}:/usr/bin:/bin", "DIFFCDC_VENV": str(tmp_path / "venv"),
           "PIP_REQUIRE_VIRTUALENV": "1"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["bash", os.path.join(ROOT, ".ci", "install")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    diffcdc = tmp_path / "venv" / "bin" / "diffcdc"
    version = subprocess.run([str(diffcdc), "--version"], capture_output=True, text=True,
                             check=False)
    assert version.returncode == 0 and version.stdout.startswith("diffcdc "), version.stderr
    # nothing of ours landed in the system interpreter
    purelib = subprocess.run([SYSTEM_PYTHON, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert not glob.glob(os.path.join(purelib, "diffcdc*")), "installed into the system Python"
    if _externally_managed(SYSTEM_PYTHON):  # the refusal is real on this machine
        refused = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "install", "--dry-run", "xxhash"],
                                 capture_output=True, text=True, check=False)
        assert refused.returncode != 0
