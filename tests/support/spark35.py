"""The second test environment on the oldest supported PySpark, classic 3.5.x.

``bash .ci/install spark35`` makes it (``.venv-spark35``: PySpark 3.5 installed first, then
diffcdc without the ``spark`` extra). Tests of the main (4.x) suite reach it through its Python
in a subprocess: ``DIFFCDC_SPARK35_PYTHON`` names it, else ``.venv-spark35/bin/python`` of this
checkout. Where it is missing such a test is skipped, except in CI (``CI`` set), which always
makes it: there a missing environment fails the test, so that the cross-version tests can never
pass without running.
"""

from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = "DIFFCDC_SPARK35_PYTHON"
DEFAULT = os.path.join(ROOT, ".venv-spark35", "bin", "python")


def spark35_python() -> str:
    """The 3.5 environment's Python; skips the test where there is none (fails it in CI)."""
    path = os.environ.get(ENV) or DEFAULT
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    message = (f"no PySpark 3.5 environment: {path} is missing (`bash .ci/install spark35` "
               f"makes it; {ENV} names another)")
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI always makes it")
    pytest.skip(message)


def checkout_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python that imports diffcdc from this checkout (not from
    wherever an environment's editable install points) and is no pytest child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env
