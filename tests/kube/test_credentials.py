"""The kubeconfig user's credentials as an Authorization header (kube/credentials.py): asked once and
kept; asked again after a 401 (a token file re-read, an exec plugin run again); a user without
credentials sends none; a credential source that fails is a clear BackendError."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lightkube.config.client_adapter import user_auth
from lightkube.config.models import User, UserExec

from devshare.kube.credentials import Credentials
from devshare.kube.errors import BackendError


async def test_a_fixed_token_is_asked_once_and_never_changes() -> None:
    creds = Credentials(user_auth(User(token="t0k")))
    assert await creds.header() == "Bearer t0k"
    assert await creds.refresh("Bearer t0k") is False  # the same token again: no retry
    assert await creds.header() == "Bearer t0k"


async def test_a_token_file_is_read_again_after_a_refusal(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = Credentials(user_auth(User(token_file=str(token))))
    assert await creds.header() == "Bearer first"
    token.write_text("rotated\n")
    assert await creds.header() == "Bearer first"  # kept until refused
    assert await creds.refresh("Bearer first") is True
    assert await creds.header() == "Bearer rotated"
    assert await creds.refresh("Bearer first") is True  # refreshed meanwhile by another request: retry


async def test_an_exec_plugin_runs_again_after_a_refusal(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json\n"
                      f"print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1beta1', "
                      f"'kind': 'ExecCredential', 'status': {{'token': open({str(token)!r}).read()}}}}))\n")
    creds = Credentials(user_auth(User(exec=UserExec(apiVersion="client.authentication.k8s.io/v1beta1",
                                                     command=sys.executable, args=[str(plugin)]))))
    assert await creds.header() == "Bearer one"
    token.write_text("two")
    assert await creds.refresh("Bearer one") is True and await creds.header() == "Bearer two"


async def test_no_credentials_send_no_header() -> None:
    creds = Credentials(None)
    assert await creds.header() is None


async def test_a_token_file_gone_is_a_clear_error(tmp_path: Path) -> None:
    creds = Credentials(user_auth(User(token_file=str(tmp_path / "missing"))))
    with pytest.raises(BackendError, match="cannot get the credentials of the kubeconfig user"):
        await creds.header()
