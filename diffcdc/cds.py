"""A class-data-sharing archive for the driver JVM: Spark's classes loaded once, mapped after.

Starting Spark loads and verifies some 10,000 classes; a dynamic CDS archive (JDK 13+) of
the classes one run loaded lets every later JVM map them instead. The archive belongs to one
JDK and one class path, so it is kept under a key made of both (the ``java`` binary with its
size and mtime, the Spark jars folder with its listing): a new JDK or Spark version simply
gets a new archive, and the JVM itself ignores an archive that does not match (``-Xshare:auto``,
its default) — a mismatch falls back silently.

The first run without an archive asks its JVM to write one when it exits, under a name with
its process id; a later run renames a finished one (its writer gone) into place.
``python -m diffcdc.cds`` builds it at once (``.ci/install`` calls it). ``DIFFCDC_CDS=0`` turns
all of this off.

A dynamic archive needs a class path without non-empty folders: Spark's launcher puts the
configuration folders on it (``SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``, ``HADOOP_CONF_DIR``,
``YARN_CONF_DIR``), and with a file in one of them the JVM writes no archive and prints
"Cannot have non-empty directory in paths" on stdout (into ``--json`` output). With such a
folder the run goes without an archive.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import time

ENV = "DIFFCDC_CDS"
#: The JVM's own log to stderr, warnings only, and nothing about CDS (which otherwise prints
#: "Skipping ...: Signed JAR" lines on stdout when writing and a warning on any mismatch).
_QUIET = "-Xlog:disable -Xlog:all=warning:stderr -Xlog:cds*=off:stderr"
#: A temporary archive this much older than its writer's end is finished.
_SETTLE_SECONDS = 5


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "diffcdc", "cds")


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def archive_key() -> str | None:
    """The key of the archive matching this JDK and Spark install (None: no java found)."""
    java = _java()
    if java is None:
        return None
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    st = os.stat(java)
    digest = hashlib.sha256(f"{java}|{st.st_size}|{st.st_mtime_ns}|{pyspark.__version__}".encode())
    for name in sorted(os.listdir(jars)) if os.path.isdir(jars) else []:
        digest.update(name.encode())
    return digest.hexdigest()[:16]


def _conf_folders() -> list[str]:
    """The folders Spark's launcher puts on the driver's class path (those that are set)."""
    spark_conf = os.environ.get("SPARK_CONF_DIR")
    if not spark_conf and os.environ.get("SPARK_HOME"):
        spark_conf = os.path.join(os.environ["SPARK_HOME"], "conf")
    if not spark_conf:
        import pyspark  # its launcher's SPARK_HOME when none is set: the package folder

        spark_conf = os.path.join(os.path.dirname(pyspark.__file__), "conf")
    return [f for f in (spark_conf, os.environ.get("HADOOP_CONF_DIR"),
                        os.environ.get("YARN_CONF_DIR")) if f]


def _non_empty_folder_on_class_path() -> str | None:
    """A configuration folder on the class path that holds something (None: none)."""
    for folder in _conf_folders():
        try:
            if os.path.isdir(folder) and os.listdir(folder):
                return folder
        except OSError:
            continue
    return None


def java_options() -> str:
    """The driver's JVM options for the archive: use it, or have this run write it (nothing
    when the class path has a non-empty folder: see the module's docstring)."""
    if os.environ.get(ENV, "1") == "0" or _non_empty_folder_on_class_path():
        return ""
    key = archive_key()
    if key is None:
        return ""
    folder = cache_dir()
    final = os.path.join(folder, f"{key}.jsa")
    try:
        os.makedirs(folder, exist_ok=True)
        _promote(key, final)
    except OSError:
        return ""
    if os.path.exists(final):
        return f"{_QUIET} -XX:SharedArchiveFile={final} -Xshare:auto"
    return f"{_QUIET} -XX:ArchiveClassesAtExit={os.path.join(folder, f'{key}.{os.getpid()}.tmp.jsa')}"


def _promote(key: str, final: str) -> None:
    """Rename a finished temporary archive into place; drop ones whose writer died early."""
    for path in glob.glob(os.path.join(os.path.dirname(final), f"{key}.*.tmp.jsa")):
        pid = int(path.rsplit(".", 3)[-3])
        if _alive(pid) or time.time() - os.path.getmtime(path) < _SETTLE_SECONDS:
            continue
        if os.path.getsize(path) > 0 and not os.path.exists(final):
            os.replace(path, final)
        else:
            os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build() -> str | None:
    """Write the archive now: a small job in a child process (:func:`diffcdc.spark.session.warm_up`,
    whose session takes its JVM options from here), then put it in place."""
    key = archive_key()
    if key is None or os.environ.get(ENV, "1") == "0":
        return None
    final = os.path.join(cache_dir(), f"{key}.jsa")
    if not os.path.exists(final):
        subprocess.run([sys.executable, "-c", "from diffcdc.spark.session import warm_up; warm_up()"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=600)
        deadline = time.time() + 120  # the JVM writes the archive as it exits
        while not os.path.exists(final) and time.time() < deadline:
            time.sleep(1)
            _promote(key, final)
    return final if os.path.exists(final) else None


if __name__ == "__main__":  # pragma: no cover - used by .ci/install
    built = build()
    print(f"diffcdc: JVM class-data-sharing archive {built or 'not built (no java)'}")
