"""``fluxstream chat`` without a key sends nothing: it says which variable to set.

It sent the request to api.openai.com without a key, and retried it three times. Now the
command stops before sending (exit 2), naming the API's own variable (``OPENAI_API_KEY``, or
``ANTHROPIC_API_KEY`` with ``--format anthropic_messages``) and ``--api-key``. A credential
given with ``--header``, or ``--api-key ''`` (a gateway that needs none), is sent as before.
A local HTTPS proxy stands for the public API: it records where it was asked to connect.
"""

from __future__ import annotations

import pytest
from cli_support import ENV, canned_server, run_cli


@pytest.mark.parametrize(("fmt", "variable", "host"), [
    ("chat_completions", "OPENAI_API_KEY", "https://api.openai.com/v1"),
    ("anthropic_messages", "ANTHROPIC_API_KEY", "https://api.anthropic.com/v1"),
])
def test_no_key_sends_nothing_and_names_the_variable(fmt: str, variable: str, host: str) -> None:
    env = {**ENV, "OPENAI_API_KEY": "sk-openai"} if fmt != "chat_completions" else dict(ENV)
    with canned_server(b"") as proxy:
        env["HTTPS_PROXY"] = proxy.base_url.removesuffix("/v1")
        result = run_cli("chat", "--format", fmt, "hi", env=env)
    assert result.returncode == 2, result.stderr
    assert proxy.requests == []
    assert result.stderr == (
        f"fluxstream: no API key for {host}: set {variable} or pass --api-key (--api-key ''"
        " sends none, for a server that needs no key)\n"
    )


@pytest.mark.parametrize("given", [["--header", "Authorization: Bearer gw"], ["--api-key", ""]])
def test_a_credential_header_or_an_empty_key_is_sent_as_before(given: list[str]) -> None:
    with canned_server(b"") as proxy:
        env = {**ENV, "HTTPS_PROXY": proxy.base_url.removesuffix("/v1")}
        result = run_cli("chat", *given, "hi", env=env)
    assert proxy.requests and set(proxy.requests) == {"CONNECT api.openai.com:443 HTTP/1.1"}
    assert "no API key" not in result.stderr
