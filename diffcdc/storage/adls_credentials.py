"""Which credential an ADLS Gen2 / OneLake landing storage signs its requests with.

Credentials, first match wins:

1. options ``credential`` (any object the SDK accepts, e.g. an azure-identity credential),
   ``account_key`` or ``sas_token`` — at most one of them; ``account_key_env`` /
   ``sas_token_env`` name an environment variable holding the key or token instead (so a
   config file can say where the secret is without holding it);
2. environment ``AZURE_STORAGE_ACCOUNT_KEY`` (or the Azure CLI's ``AZURE_STORAGE_KEY``), then
   ``AZURE_STORAGE_SAS_TOKEN`` (a SAS on the URL counts as an option);
3. ``azure.identity.DefaultAzureCredential()`` (service principal from the environment, workload
   or managed identity, Azure CLI, ...). Bearer tokens need https.

Every key and token is registered with the scrubber, so it never reaches a message or a log
record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import ClientAuthenticationError

from diffcdc.errors import ConfigError
from diffcdc.extras import ADLS_IDENTITY, require
from diffcdc.storage.adls_transport import LOGGER, SCRUB
from diffcdc.storage.adls_url import AdlsLocation

log = logging.getLogger(LOGGER)
T = TypeVar("T")

ENV_ACCOUNT_KEY = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY")
ENV_SAS_TOKEN = "AZURE_STORAGE_SAS_TOKEN"

#: The secret options: alternatives, at most one of them.
SECRET_OPTIONS = ("credential", "account_key", "sas_token")
#: Options naming the environment variable that holds a secret option's value.
ENV_OPTIONS = {"account_key_env": "account_key", "sas_token_env": "sas_token"}


def fill_secret_options(
    location: AdlsLocation, options: dict[str, Any], url_sas: str | None
) -> str | None:
    """Put into ``options`` the secrets its ``*_env`` options name and the SAS of the URL.

    Returns where the secret came from when an ``*_env`` option named it, else None.
    """
    source = None
    for env_option, target in ENV_OPTIONS.items():
        variable = options.pop(env_option, None)
        if variable is None:
            continue
        if options.get(target):
            raise ConfigError(f"{location.display}: give {target} or {env_option}, not both")
        value = os.environ.get(str(variable))
        if not value:
            raise ConfigError(
                f"{location.display}: environment variable {variable} ({env_option}) is "
                "not set or empty",
                hint=f"export {variable}=... before the run, or remove {env_option}",
            )
        options[target] = value
        source = f"{variable} ({env_option})"
    if url_sas:
        if options.get("sas_token"):
            raise ConfigError(f"{location.display}: a SAS token on the URL and in options")
        options["sas_token"] = url_sas
    return source


def resolve_credential(
    location: AdlsLocation, credential: Any, account_key: str | None, sas_token: str | None
) -> tuple[Any, str, bool]:
    """The SDK credential, where it came from, and whether we created it (and must close it)."""
    given = [n for n, v in (("credential", credential), ("account_key", account_key),
                            ("sas_token", sas_token)) if v]
    if len(given) > 1:
        raise ConfigError(
            f"{location.display}: give only one of {', '.join(given)}",
            hint="credential, account_key and sas_token are alternatives",
        )
    if credential:
        if isinstance(credential, str):  # the SDK takes a key or a SAS here too
            SCRUB.add(credential)
        return credential, "credential option", False
    if account_key:
        return key_credential(location, account_key), "account_key option", False
    if sas_token:
        return sas_credential(sas_token), "sas_token option", False
    for name in ENV_ACCOUNT_KEY:
        if os.environ.get(name):
            return key_credential(location, os.environ[name]), name, False
    if os.environ.get(ENV_SAS_TOKEN):
        return sas_credential(os.environ[ENV_SAS_TOKEN]), ENV_SAS_TOKEN, False
    require(ADLS_IDENTITY, where=location.display)  # in [adls]; absent if the SDK came apart
    return DefaultIdentity(location), "DefaultAzureCredential", True


#: True while :class:`DefaultIdentity` asks its chain for a token: the chain's warning (a dozen
#: lines, one per identity it tried) is then kept off stderr; diffcdc says it in one line.
_ASKING: ContextVar[bool] = ContextVar("diffcdc_adls_asking_identity", default=False)
#: The azure-identity logger whose warning lists every identity the chain tried.
CHAIN_LOGGER = "azure.identity._credentials.chained"


class _QuietWhileAsking(logging.Filter):
    """Drops the chain's records while :class:`DefaultIdentity` asks (only then)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _ASKING.get()


_QUIET = _QuietWhileAsking()


class DefaultIdentity:
    """``DefaultAzureCredential`` for a location given no key or SAS token. Until it has given
    a token, its failure is a :class:`ConfigError` in one line naming the location, what is
    missing and where a credential comes from (the chain's own text goes to the debug log); a
    failure after that (a token that can no longer be renewed) stays the SDK's, which the
    store words as access denied."""

    def __init__(self, location: AdlsLocation) -> None:
        from azure.identity import DefaultAzureCredential

        chain = logging.getLogger(CHAIN_LOGGER)
        if _QUIET not in chain.filters:
            chain.addFilter(_QUIET)
        self._chain = DefaultAzureCredential()
        self._location = location
        self._signed_in = False

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        return self._ask(lambda: self._chain.get_token(*scopes, **kwargs))

    def get_token_info(self, *scopes: str, options: Any = None) -> Any:
        return self._ask(lambda: self._chain.get_token_info(*scopes, options=options))

    def close(self) -> None:
        self._chain.close()

    def _ask(self, ask: Callable[[], T]) -> T:
        asking = _ASKING.set(True)
        try:
            answer = ask()
        except ClientAuthenticationError as exc:
            if self._signed_in:
                raise
            log.debug("DefaultAzureCredential got no token: %s", SCRUB.secrets_only(str(exc)))
            raise ConfigError(
                f"{self._location.display}: no credential: no account_key, sas_token (or "
                "their _env option) is given, neither AZURE_STORAGE_ACCOUNT_KEY nor "
                "AZURE_STORAGE_SAS_TOKEN is set, and DefaultAzureCredential got no token from "
                "any identity it tries",
                hint="export AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, name one with "
                "the account_key_env / sas_token_env option, or sign in an identity "
                "(AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, a managed identity, "
                "az login); see docs/remote-landing.md",
            ) from None
        finally:
            _ASKING.reset(asking)
        self._signed_in = True
        return answer


def key_credential(location: AdlsLocation, key: str) -> AzureNamedKeyCredential:
    SCRUB.add(key)
    return AzureNamedKeyCredential(location.account_name, key)


def sas_credential(token: str) -> str:
    token = token.strip().lstrip("?")
    SCRUB.add(token)
    return token
