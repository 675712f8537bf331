"""The server's request records hold no secret, whichever header a provider takes its key in:
tests print and compare records, and a record is what a failing test shows."""

from __future__ import annotations

import httpx
import pytest

from fluxstream.server import ServerThread

SECRETS = {
    "authorization": ("Bearer sk-live-0123456789", "Bearer <redacted>"),
    "proxy-authorization": ("Basic dXNlcjpwYXNzd29yZA==", "Basic <redacted>"),
    "x-api-key": ("sk-ant-0123456789", "<redacted>"),
    "api-key": ("azure-0123456789", "<redacted>"),  # Azure OpenAI
    "x-goog-api-key": ("AIza0123456789", "<redacted>"),  # Gemini
    "cookie": ("session=s3cr3t-0123456789", "<redacted>"),
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_secret_header_is_recorded_redacted(server: ServerThread, name: str) -> None:
    value, recorded = SECRETS[name]
    httpx.post(server.base_url + "/chat/completions", headers={name: value},
               json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    (request,) = server.records.requests
    assert request.header(name) == recorded
    assert value.partition(" ")[2 if " " in value else 0] not in repr(request)
