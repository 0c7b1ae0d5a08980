"""One registry of stores: which backend serves a location, by its URL scheme.

* a local path (or ``file:`` URI): :class:`~diffcdc.storage.local.LocalStore`;
* ``abfss://``, ``abfs://``, ``https://``, ``http://``: ADLS Gen2 / OneLake,
  :class:`~diffcdc.storage.adls.AdlsStore` (options: credentials and transport settings);
* ``webhdfs://``: :class:`~diffcdc.storage.webhdfs.WebHdfsStore`.

Backends are imported when first used (the Azure SDK is heavy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diffcdc.errors import ConfigError
from diffcdc.extras import ADLS as ADLS_SDK
from diffcdc.extras import require
from diffcdc.storage.base import ByteStore


def _local(location: str, **options: Any) -> ByteStore:
    from diffcdc.storage.local import LocalStore

    if options:  # a remote root's options (--landing-option max_workers=8): none apply here
        raise ConfigError(
            f"option(s) {', '.join(sorted(options))} do not apply to a local folder",
            path=local_path(location),
            hint="landing_options and --landing-option are for a landing root on ADLS Gen2 / "
            "OneLake (abfss://, https://): leave them out for a local one",
        )

    return LocalStore(local_path(location), **options)


def _adls(location: str, **options: Any) -> ByteStore:
    require(ADLS_SDK, where=location.split("?", 1)[0])  # a query may hold a SAS
    from diffcdc.storage.adls import AdlsStore

    return AdlsStore.from_url(location, **options)


def _webhdfs(location: str, **options: Any) -> ByteStore:
    from diffcdc.storage.webhdfs import WebHdfsStore

    return WebHdfsStore(location, **options)


#: Backend by URL scheme ("" is a local path).
BACKENDS: dict[str, Callable[..., ByteStore]] = {
    "": _local,
    "file": _local,
    "abfss": _adls,
    "abfs": _adls,
    "https": _adls,
    "http": _adls,
    "webhdfs": _webhdfs,
}

#: Schemes whose files Spark's executors and diffcdc's own reads both reach by URL (a state
#: data folder may be one).
DATA_SCHEMES = ("webhdfs",)

#: Schemes of ADLS Gen2 / OneLake (a state root or a landing zone may be one).
ADLS_SCHEMES = ("abfss", "abfs", "https", "http")


def scheme(location: str) -> str:
    """``location``'s URL scheme, lower case; ``""`` for a local path (``file:`` included)."""
    if location.lower().startswith("file:"):
        return "file"
    return location.split("://", 1)[0].lower() if "://" in location else ""


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL (``scheme://...``) rather than a local path."""
    return scheme(location) not in ("", "file")


def local_path(location: str) -> str:
    """A ``file:`` URI as a plain path (Hadoop qualifies local paths so); others unchanged."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if location.startswith("file:"):
        return location[len("file:"):]
    return location


def open_store(location: str, **options: Any) -> ByteStore:
    """The store of ``location`` (a local path or a URL); ``options`` go to its backend."""
    backend = BACKENDS.get(scheme(location))
    if backend is None:
        raise ConfigError(
            f"unsupported location {location.split('?', 1)[0]!r}",  # a query may hold a SAS
            hint="use a local folder, abfss://..., https://... or webhdfs://...",
        )
    return backend(location, **options)
