"""Which PySpark this process has, and whether diffcdc runs on it.

pyspark is not a hard dependency: where the platform provides its own (a Databricks or Fabric
runtime, ``databricks-connect``, ``pyspark-client``) diffcdc uses that one, and ``pip install
"diffcdc[spark]"`` brings open-source PySpark for standalone use. Supported: classic PySpark
3.5.x and 4.x, and Spark Connect 4.x (client and server). Checked once at start (the command
line, :func:`diffcdc.run_dataframe`, a Spark Connect session's server), so that a missing or an
unsupported PySpark is one line naming what was found and what to install, never an import
error from deep inside a run.
"""

from __future__ import annotations

import importlib.util
import re

from diffcdc.errors import ConfigError

SUPPORTED = "classic PySpark 3.5.x or 4.x, or Spark Connect 4.x"
INSTALL = 'pip install "diffcdc[spark]"'


def parse(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version text (``4.0.1``, ``3.5.3.dev0``, ``15.4.x-scala2.12``)."""
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def installed() -> str | None:
    """The version of the PySpark this process imports, or None when there is none."""
    if importlib.util.find_spec("pyspark") is None:
        return None
    from pyspark.version import __version__

    return str(__version__)


def supported(version: str, *, connect: bool) -> bool:
    """Whether diffcdc runs on PySpark ``version`` (a Spark Connect client or server when
    ``connect``)."""
    major, minor = parse(version)
    if connect:
        return major == 4
    return (major, minor) >= (3, 5) and major < 5


def require_pyspark(*, connect: bool = False) -> str:
    """The installed PySpark's version; a one-line :class:`ConfigError` when there is none or
    diffcdc does not run on it."""
    version = installed()
    if version is None:
        raise ConfigError(
            "PySpark is not installed in this Python environment",
            hint=f"{INSTALL} (or run diffcdc where the platform provides pyspark: a Databricks "
            "or Fabric runtime, databricks-connect, pyspark-client)",
        )
    if not supported(version, connect=connect):
        raise ConfigError(
            f"PySpark {version} is not supported{' for Spark Connect' if connect else ''} "
            f"(diffcdc runs on {SUPPORTED})",
            hint=f"{INSTALL} for a supported PySpark, or use a runtime with one",
        )
    if not connect and parse(version) < (4, 0) and importlib.util.find_spec("pandas") is None:
        # PySpark 3.5's mapInArrow and Arrow collection go through its pandas layer (4.x's do
        # not); platforms ship pandas, and diffcdc's own [gx] extra brings it.
        raise ConfigError(
            f"PySpark {version} needs pandas (for its Arrow exchange), which is not installed",
            hint='pip install "pandas>=2,<3" (PySpark 3.5\'s own sql extra brings it)',
        )
    return version


def require_server(version: str, url: str) -> None:
    """A one-line :class:`ConfigError` unless the Spark Connect server at ``url`` runs a Spark
    diffcdc supports over Connect."""
    if not supported(version, connect=True):
        where = url if url.startswith("of ") else f"at {url}"
        raise ConfigError(
            f"the Spark Connect server {where} runs Spark {version}; diffcdc runs on Spark "
            "Connect 4.x",
            hint="point the remote at a Spark 4 server (Databricks serverless or Runtime 17.3 "
            "LTS and newer, Spark 4's start-connect-server.sh), or use classic Spark",
        )
