"""An API key a header cannot carry never reaches the HTTP library, whose error would show it.

A key read from a file or a secret store often keeps its trailing newline. httpx refused the
header with ``LocalProtocolError: Illegal header value b'Bearer sk-...\\n'``: the whole key in
the error's text (README: the API key never appears in an error), wrapped in an
``APIConnectionError`` and retried; aiohttp raised a raw ``ValueError``. Surrounding whitespace
is dropped (HTTP drops it from a header value anyway, so such a key could never be sent with
it); any other character a header cannot carry (control characters, non-ASCII) is refused when
the client is made, with a message that does not show the key.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream._endpoints import anthropic_client
from fluxstream._retry import RetryPolicy

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize("padding", ["\n", "\r\n", " ", "\t\n"])
async def test_a_key_with_a_trailing_newline_authenticates(
    keyed_server: Any, test_api_key: str, padding: str, transport: str, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(
        keyed_server.base_url, api_key=test_api_key + padding, transport=transport,
        retry=RetryPolicy.off(),
    ) as client:
        with anyio.fail_after(5):
            reply = await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    assert reply.outcome == "done"


@pytest.mark.parametrize("key", ["sk-SECRET\nx", "sk-SECRET\x00", "sk-SECRÉT", "sk-SEC\x7fRET"])
def test_a_key_a_header_cannot_carry_is_refused_without_showing_it(key: str) -> None:
    for make in (fluxstream.AsyncClient, anthropic_client):
        with pytest.raises(ValueError) as info:
            make("http://127.0.0.1:9/v1", api_key=key)
        assert "SECRET" not in str(info.value) and "SECR" not in repr(info.value)


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_header_value_with_a_line_break_is_a_typed_error(
    server: Any, transport: str, anyio_backend: str
) -> None:
    """A caller's header with CR/LF: httpx says ``LocalProtocolError``, aiohttp said a raw
    ``ValueError``; both are ``APIConnectionError`` now, and the stream states ``failed``."""
    async with fluxstream.AsyncClient(
        server.base_url, transport=transport, retry=RetryPolicy.off()
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG, extra_headers={"x-a": "a\r\nb"})
        with anyio.fail_after(5), pytest.raises(fluxstream.APIConnectionError):
            async with stream:
                pass
    assert stream.outcome == "failed"
