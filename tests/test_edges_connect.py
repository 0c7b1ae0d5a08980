"""Issue 38, a Spark Connect server that dies mid-run: a lost (killed) or hung (stopped)
server ends the run within ``connect_timeout`` in one line, releasing the table's lease, and
the rerun against a restarted server is exact; ``--remote`` without the connect extra names
the extra to install.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.snapshots import snapshot_one, write_snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A client whose Python cannot import the gRPC client's packages (the connect extra).
WITHOUT_GRPC = """import sys
sys.modules["grpc"] = None  # `import grpc` raises ImportError, as where it is not installed
from diffcdc.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a subprocess (no Spark, no server)
def test_remote_without_the_connect_extra_names_the_extra(tmp_path):
    root = str(tmp_path)
    write_snapshot(os.path.join(root, "source"), "1.parquet", snapshot_one(3), seed=0)
    (tmp_path / "client.py").write_text(WITHOUT_GRPC)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run(
        [sys.executable, "client.py", "run", "--source", "source", "--keys", "k1,k2",
         "--table", "T", "--landing", "landing", "--state", "state",
         "--remote", "sc://127.0.0.1:15002"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, done.stderr
    assert "pip install 'diffcdc[connect]'" in lines[0], lines[0]
    assert "grpcio" in lines[0] and "give it as sc://host:port" not in lines[0], lines[0]
    assert not os.path.exists(os.path.join(root, "landing"))
    assert not os.path.exists(os.path.join(root, "state", "T"))
