"""``diffcdc`` run in a subprocess where optional libraries cannot be imported, as if their extra
were not installed: a ``sitecustomize`` on ``PYTHONPATH`` blocks them in every Python process
it starts (the CLI and Spark's Python workers), and
the CLI's process writes, when it exits, which of them diffcdc's own code tried to import.

The block is a finder ahead of all others that finds none of them (``ModuleNotFoundError``,
as when the library is not installed), not None in ``sys.modules``: pyarrow reads
``sys.modules["pandas"]`` directly and would fail where a missing pandas is fine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The top-level modules the extras bring (pandas: with great_expectations, in ``[gx]``).
EXTRA_MODULES = ("deltalake", "confluent_kafka", "fastavro", "azure", "great_expectations",
                 "pandas", "psycopg")

_SITECUSTOMIZE = '''
import atexit, json, os, sys

_blocked = set(json.loads(os.environ["DIFFCDC_TEST_BLOCKED"]))
_attempts = []


class _Blocker:
    """A finder ahead of all others that finds no blocked module, as if not installed; of
    an import (not a mere look-up, importlib.util.find_spec) it notes who asked: the first
    frame outside the import system."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in _blocked:
            return None
        frame, importing, lookup = sys._getframe(1), False, False
        while frame is not None and ("importlib" in frame.f_code.co_filename
                                     or frame.f_code.co_filename.startswith("<frozen")):
            importing = importing or frame.f_code.co_name == "_find_and_load"
            lookup = lookup or frame.f_code.co_name == "find_spec"  # (a dotted one's parent)
            frame = frame.f_back
        if importing and not lookup:
            _attempts.append([name, frame.f_code.co_filename if frame is not None else "?"])
        raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)


sys.meta_path.insert(0, _Blocker())


def _report():
    report = os.environ.get("DIFFCDC_TEST_IMPORTED")
    if report and os.getpid() == int(os.environ["DIFFCDC_TEST_MAIN_PID"] or 0):
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in _blocked)
        with open(report, "w") as handle:
            json.dump({"loaded": loaded, "attempts": _attempts}, handle)


atexit.register(_report)
'''

_MARK_MAIN = "import os; os.environ['DIFFCDC_TEST_MAIN_PID'] = str(os.getpid())\n"
_MAIN = _MARK_MAIN + "import sys; from diffcdc.cli.main import main; sys.exit(main(sys.argv[1:]))"


@dataclass(frozen=True)
class BlockedRun:
    """What a ``diffcdc`` call with blocked modules did."""

    returncode: int
    stdout: str
    stderr: str
    loaded: list[str]
    """Modules of the blocked packages in ``sys.modules`` when the CLI exited (none, unless
    the blocking failed)."""
    ours: list[str]
    """The blocked modules diffcdc's own code tried to import (pyspark and pyarrow try some
    optionally: theirs are not counted; nor is looking one up without importing it)."""


def run_blocked(tmp_path, args: list[str], blocked: tuple[str, ...] = EXTRA_MODULES,
                timeout: float = 600, main: str | None = None) -> BlockedRun:
    """``diffcdc args`` (this checkout's CLI; or the Python code ``main``) in a subprocess with
    ``blocked`` not importable."""
    site = tmp_path / "blocked-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    report = tmp_path / "imported.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), ROOT, os.environ.get("PYTHONPATH"))
                                      if p),
        "DIFFCDC_TEST_BLOCKED": json.dumps(list(blocked)),
        "DIFFCDC_TEST_IMPORTED": str(report),
        "DIFFCDC_TEST_MAIN_PID": "",
    }
    code = _MAIN if main is None else _MARK_MAIN + main
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if report.exists():
        found = json.loads(report.read_text())
        loaded = found["loaded"]
        package = os.path.join(ROOT, "diffcdc") + os.sep
        ours = sorted({name for name, where in found["attempts"] if where.startswith(package)})
    else:
        loaded, ours = ["(the CLI wrote no report)"], []
    return BlockedRun(done.returncode, done.stdout, done.stderr, loaded, ours)
