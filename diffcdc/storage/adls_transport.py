"""The ADLS sink's HTTP side: bounded retries, secrets kept out of messages and logs, and SDK
exceptions mapped to diffcdc's storage errors.

Every retry is logged on the ``diffcdc.sinks.storage.adls`` logger; SAS signatures and the secrets a
storage was opened with are scrubbed from error messages and from the SDK's and urllib3's
log records.
"""

from __future__ import annotations

import logging
import random
import re
import ssl
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import unquote, urlsplit

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.filedatalake import ExponentialRetry

from diffcdc.errors import StorageError, TransientStorageError

#: The logger retries and the storage's own records go to.
LOGGER = "diffcdc.sinks.storage.adls"
log = logging.getLogger(LOGGER)

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504, 507, 509})

# ------------------------------------------------------------------------------------------
# Secrets out of messages and logs


_QUERY_RE = re.compile(r"\?[^\s'\"<>)]*")
_SIG_RE = re.compile(r"(?i)\b(sig|signature)=[^&\s'\"]*")


class _Scrubber:
    """Removes known secrets and URL query strings from text."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str | None) -> None:
        if not secret:
            return
        with self._lock:
            self._secrets.add(secret)
            self._secrets.add(unquote(secret))
            for value in re.findall(r"(?i)(?:^|[?&])sig=([^&]+)", secret):
                self._secrets.add(value)
                self._secrets.add(unquote(value))

    def secrets_only(self, text: str) -> str:
        """Redact SAS signatures and known secrets; keep the rest (for log records)."""
        text = _SIG_RE.sub(r"\1=<redacted>", text)
        with self._lock:
            secrets = sorted(self._secrets, key=len, reverse=True)
        for secret in secrets:
            if len(secret) >= 6:
                text = text.replace(secret, "<redacted>")
        return text

    def __call__(self, text: str) -> str:
        """Redact secrets and drop URL query strings (for error messages)."""
        return self.secrets_only(_QUERY_RE.sub("?<redacted>", text))


SCRUB = _Scrubber()


class _RedactingFilter(logging.Filter):
    """Scrubs SAS signatures and known secrets from third-party log records."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # pragma: no cover - a broken record is not ours to fix
            return True
        cleaned = SCRUB.secrets_only(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_FILTER = _RedactingFilter()
_FILTERED_LOGGERS = (
    "urllib3.connectionpool",
    "azure.core.pipeline.policies.http_logging_policy",
    "azure.storage.filedatalake._shared.policies",
    "azure.storage.blob._shared.policies",
    LOGGER,
)


def install_log_filter() -> None:
    for name in _FILTERED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


# ------------------------------------------------------------------------------------------
# Retries


class BoundedRetry(ExponentialRetry):
    """The SDK's retry policy, bounded, with 429 added and every retry logged.

    The storage SDK does not retry 429 (OneLake throttles with it) and waits 15+ seconds by
    default; this one retries 408/429/5xx and network errors ``retry_total`` times with capped
    exponential backoff and full jitter, honouring ``Retry-After`` up to ``backoff_max``.
    """

    def __init__(self, retry_total: int, backoff: float, backoff_max: float) -> None:
        super().__init__(
            initial_backoff=0, increment_base=2, retry_total=retry_total, random_jitter_range=0
        )
        self.retry_total = retry_total
        self.backoff = backoff
        self.backoff_max = backoff_max

    def delay_for(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after:
            hinted = _parse_retry_after(retry_after)
            if hinted is not None:
                return min(max(hinted, 0.0), self.backoff_max)
        ceiling = min(self.backoff_max, self.backoff * (2**attempt))
        return random.uniform(ceiling / 2, ceiling)

    def send(self, request: Any) -> Any:
        settings = self.configure_retries(request)  # pops per-request retry options
        http_request = request.http_request
        attempt = 0
        while True:
            response = None
            error: AzureError | None = None
            try:
                response = self.next.send(request)
            except (ServiceRequestError, ServiceResponseError) as exc:
                if is_tls_verify_error(exc):
                    raise  # a certificate problem does not heal by itself
                error = exc
            if error is None:
                status = response.http_response.status_code
                if status not in RETRY_STATUS:
                    return self._done(response, settings)
                code = response.http_response.headers.get("x-ms-error-code", "")
                reason = f"HTTP {status} {code}"
                retry_after = response.http_response.headers.get("Retry-After")
            else:
                reason = f"{type(error).__name__}: {first_line(str(error))}"
                retry_after = None
            if attempt >= self.retry_total or not _rewind(http_request, settings):
                if error is not None:
                    raise error
                return self._done(response, settings)
            delay = self.delay_for(attempt, retry_after)
            log.warning(
                "ADLS %s %s failed (%s); retry %d of %d in %.2fs",
                http_request.method,
                urlsplit(http_request.url).path,
                SCRUB(reason),
                attempt + 1,
                self.retry_total,
                delay,
            )
            if delay > 0:
                time.sleep(delay)
            attempt += 1

    @staticmethod
    def _done(response: Any, settings: dict[str, Any]) -> Any:
        # What StorageRetryPolicy.send leaves on every response; the blob downloader reads it.
        response.http_response.location_mode = settings["mode"]
        return response


def is_tls_verify_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        if isinstance(current, BaseException):
            stack.extend(
                getattr(current, name, None)
                for name in ("inner_exception", "reason", "__cause__", "__context__")
            )
            stack.extend(a for a in current.args if isinstance(a, BaseException))
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _parse_retry_after(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None


def _rewind(http_request: Any, settings: dict[str, Any]) -> bool:
    body = http_request.body
    if body is None or not hasattr(body, "read"):
        return True
    position = settings.get("body_position")
    if position is None:
        return False
    try:
        body.seek(position)
    except (OSError, ValueError):
        return False
    return True


def error_code(exc: BaseException) -> str | None:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code)) if code else None


def first_line(text: str, limit: int = 240) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def storage_error(
    exc: Exception, action: str, path: str, *, storage: str, credential_source: str, retries: int
) -> StorageError:
    """Map an SDK exception to ours, with no secret in the message.

    ``storage`` is the storage's display name, ``credential_source`` where its credential came
    from and ``retries`` how many times a request is retried.
    """
    status = getattr(exc, "status_code", None)
    code = error_code(exc)
    where = f"{action} {path or '/'} in {storage}"
    detail = SCRUB(first_line(getattr(exc, "message", None) or str(exc)))
    if status in (401, 403) or (isinstance(exc, ClientAuthenticationError) and status is None):
        return StorageError(
            f"{where}: access denied ({f'HTTP {status} ' if status else ''}{code or detail})",
            path=path,
            hint=f"check the credential (from {credential_source}) and its permissions",
        )
    if is_tls_verify_error(exc):
        return StorageError(
            f"{where}: the server's TLS certificate is not trusted",
            path=path,
            hint="give the CA bundle with the connection_verify option",
        )
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return TransientStorageError(
            f"{where}: network error after {retries} retries ({type(exc).__name__}: {detail})",
            path=path,
            hint="the service or network is unavailable; run again later",
        )
    if status in RETRY_STATUS:
        return TransientStorageError(
            f"{where}: HTTP {status} {code or detail} after {retries} retries",
            path=path,
            hint="the service is busy or throttling; run again later",
        )
    return StorageError(f"{where}: HTTP {status} {code or detail}", path=path)
