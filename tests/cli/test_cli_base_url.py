"""Where ``chat``/``capture --format anthropic_messages`` send the request: ``--base-url``,
always (read as Anthropic's SDK reads a base URL); otherwise Anthropic's own setting, and one
line on stderr when that is not the ``OPENAI_BASE_URL`` the user set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ENV, canned_server, run_cli

from fluxstream.server import ServerThread


@pytest.fixture
def two_servers() -> Iterator[tuple[Any, Any]]:
    with ServerThread(port=0) as one, ServerThread(port=0) as other:
        yield one, other


def test_an_explicit_base_url_is_taken_as_the_apis_sdk_takes_it() -> None:
    """``--base-url`` wins over the environment, and is read as Anthropic's SDK reads its
    base URL (a gateway's ``.../anthropic`` is posted to ``.../anthropic/v1/messages``)."""
    with canned_server(b"event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n") as srv:
        base = srv.base_url.removesuffix("/v1") + "/gateway/anthropic"
        env = {**ENV, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/elsewhere"}
        result = run_cli("chat", "--format", "anthropic_messages", "--base-url", base, "hi",
                         env=env)
    assert srv.requests == ["POST /gateway/anthropic/v1/messages HTTP/1.1"], result.stderr
    assert "sending to" not in result.stderr


@pytest.mark.parametrize("command", ["chat", "capture"])
def test_anthropic_base_url_wins_over_openai_base_url_and_says_so(
    two_servers: tuple[Any, Any], command: str, tmp_path: Path
) -> None:
    openai_server, anthropic_server = two_servers
    env = {**ENV, "OPENAI_BASE_URL": openai_server.base_url,
           "ANTHROPIC_BASE_URL": anthropic_server.base_url.removesuffix("/v1")}
    extra = ["-o", str(tmp_path / "c.json")] if command == "capture" else []
    result = run_cli(command, "--format", "anthropic_messages", *extra, "hi", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r.path for r in anthropic_server.records.requests] == ["/v1/messages"]
    assert openai_server.records.requests == []
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        f"fluxstream: sending to {anthropic_server.base_url} (ANTHROPIC_BASE_URL, for --format"
        " anthropic_messages), not OPENAI_BASE_URL; --base-url chooses"
    )


def test_without_anthropic_base_url_the_public_api_is_named(two_servers: tuple[Any, Any]) -> None:
    """``OPENAI_BASE_URL`` points at a local server, ``ANTHROPIC_BASE_URL`` is not set: the
    request goes to Anthropic's public API (here stopped by a local HTTPS proxy that records
    where it was asked to connect), and stderr says so before anything is sent."""
    local, _ = two_servers
    with canned_server(b"") as proxy:
        env = {**ENV, "OPENAI_BASE_URL": local.base_url, "ANTHROPIC_API_KEY": "sk-ant",
               "HTTPS_PROXY": proxy.base_url.removesuffix("/v1")}
        result = run_cli("chat", "--format", "anthropic_messages", "hi", env=env)
    assert result.returncode == 1
    assert local.records.requests == []
    assert proxy.requests and set(proxy.requests) == {"CONNECT api.anthropic.com:443 HTTP/1.1"}
    first = result.stderr.splitlines()[0]
    assert first == (
        "fluxstream: sending to https://api.anthropic.com/v1 (Anthropic's API: ANTHROPIC_BASE_URL"
        " is not set), not OPENAI_BASE_URL; --base-url chooses"
    )
