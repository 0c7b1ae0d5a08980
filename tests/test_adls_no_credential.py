"""An ADLS (abfss://) landing or state given no credential: the azure-identity chain's
dozen-line warning (one line per identity it tried) never reaches stderr; the first request is
refused in one line naming the URL, what is missing and where a credential comes from (exit
2). No network needed: the chain finds nothing before a request would leave the machine."""

from __future__ import annotations

import logging
import os

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError

from diffcdc.cli.main import main
from diffcdc.errors import ConfigError
from diffcdc.storage.adls import AdlsStore
from diffcdc.storage.adls_credentials import DefaultIdentity
from diffcdc.storage.adls_url import parse_adls_url
from tests.support.cli_runs import rows, write

URL = "abfss://ws@127.0.0.1:1/lh/Files/LandingZone"


@pytest.fixture
def no_credential(monkeypatch, tmp_path):
    """No key, SAS token or identity in the environment (nor an Azure CLI login)."""
    for name in list(os.environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "no-az-login"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # no az, azd or pwsh to ask


def _identity_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("azure.identity") and r.levelno >= logging.WARNING]


def test_a_store_without_credential_is_refused_in_one_line(no_credential, capsys, caplog):
    with AdlsStore.from_url(URL) as store, pytest.raises(ConfigError) as refused:
        store.list("T")
    message = str(refused.value)
    assert refused.value.exit_code == 2 and "\n" not in message
    assert message.startswith(f"{URL}: no credential: no account_key, sas_token")
    assert "DefaultAzureCredential got no token" in message
    assert "AZURE_STORAGE_ACCOUNT_KEY" in message and "account_key_env" in message
    assert "docs/remote-landing.md" in message
    assert capsys.readouterr().err == "" and _identity_warnings(caplog) == []  # kept off stderr


def test_plan_with_an_adls_landing_without_credential_prints_no_sdk_warning(no_credential,
                                                                             tmp_path, capsys,
                                                                             caplog):
    write(str(tmp_path / "src" / "s1" / "part.parquet"), rows(2))
    code = main(["plan", "--source", str(tmp_path / "src"), "--keys", "id", "--table", "T",
                 "--landing", URL, "--state", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "DefaultAzureCredential failed" not in err and "EnvironmentCredential" not in err
    assert _identity_warnings(caplog) == []


class _Chain:
    """A credential that gives one token, then fails (a token that cannot be renewed)."""

    def __init__(self) -> None:
        self.asked = 0

    def get_token_info(self, *scopes: str, options: object = None) -> AccessToken:
        self.asked += 1
        if self.asked > 1:
            raise ClientAuthenticationError(message="token expired and not renewed")
        return AccessToken("token", 0)


def test_a_failure_after_a_token_was_given_stays_the_sdks(no_credential):
    identity = DefaultIdentity(parse_adls_url(URL)[0])
    identity._chain = _Chain()  # type: ignore[assignment]
    assert identity.get_token_info("scope").token == "token"
    with pytest.raises(ClientAuthenticationError, match="not renewed"):
        identity.get_token_info("scope")
