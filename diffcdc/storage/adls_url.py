"""Where an ADLS Gen2 / OneLake landing root lives, parsed from its URL (no secret kept).

The accepted URL forms are described in :mod:`diffcdc.storage.adls`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from diffcdc.errors import ConfigError


@dataclass(frozen=True)
class AdlsLocation:
    """Where a remote landing root lives; holds no secret."""

    account_url: str  #: ``https://host`` (host style) or ``http(s)://host:port/<account>``
    account_name: str  #: used for SharedKey signing
    file_system: str
    root: str  #: path inside the filesystem, no leading or trailing ``/``
    display: str  #: the URL as the user wrote it, without query string or user info


def parse_adls_url(url: str) -> tuple[AdlsLocation, str | None]:
    """Split a landing URL into its location and the SAS token it carries (if any)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    sas = parts.query or None
    host = parts.netloc.rsplit("@", 1)[-1]
    if not host:
        raise ConfigError(f"landing URL has no host: {redact_url(url)}")
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if scheme in ("abfss", "abfs"):
        file_system = unquote(parts.netloc.rsplit("@", 1)[0]) if "@" in parts.netloc else ""
        if not file_system:
            raise ConfigError(
                f"{redact_url(url)}: abfss URLs name the filesystem before '@'",
                hint="abfss://<filesystem>@<account>.dfs.core.windows.net/<path>",
            )
        display = f"{scheme}://{file_system}@{host}/" + "/".join(segments)
        location = _host_style(
            "https", host, [file_system, *segments], display.rstrip("/")
        )
    elif scheme in ("https", "http"):
        display = f"{scheme}://{host}/" + "/".join(segments)
        hostname = (parts.hostname or "").lower()
        if ".dfs." in hostname or ".blob." in hostname:
            location = _host_style(scheme, host, segments, display.rstrip("/"))
        else:
            if len(segments) < 2:
                raise ConfigError(
                    f"{redact_url(url)}: expected <scheme>://<host>/<account>/<filesystem>/<path>",
                    hint="hosts outside Azure use the path-style (emulator) convention",
                )
            location = AdlsLocation(
                account_url=f"{scheme}://{host}/{segments[0]}",
                account_name=segments[0],
                file_system=segments[1],
                root="/".join(segments[2:]),
                display=display.rstrip("/"),
            )
    else:
        raise ConfigError(f"unsupported landing URL scheme {scheme!r}")
    return location, sas


def _host_style(scheme: str, host: str, segments: list[str], display: str) -> AdlsLocation:
    if not segments:
        raise ConfigError(f"{display}: the URL names no filesystem (workspace)")
    host = re.sub(r"\.blob\.", ".dfs.", host, count=1)
    return AdlsLocation(
        account_url=f"{scheme}://{host}",
        account_name=host.split(".", 1)[0],
        file_system=segments[0],
        root="/".join(segments[1:]),
        display=display,
    )


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"
