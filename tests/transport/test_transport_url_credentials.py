"""A base URL with credentials (``http://user:pw@host/v1``) works the same on every transport.

httpx turns the URL's credentials into Basic authentication, replacing any ``Authorization``
header (the ``api_key``'s Bearer token included). aiohttp refuses the combination outright (a
raw ``ValueError`` "Cannot combine AUTHORIZATION header with ... credentials encoded in URL"),
so with ``api_key=`` and such a URL every request of the default asyncio transport failed with
an untyped exception. The client now takes the credentials out of the URL and sends them as
Basic authentication itself, as httpx would, so no transport ever sees them in a URL (and
httpx's INFO log of each request's URL cannot show them: tests/client/test_header_secrets.py).
"""

from __future__ import annotations

import base64

import anyio
import anyio.abc
import pytest
from raw_upstream import FINISH, HEAD, MSG, read_request, text, upstream

import fluxstream
from fluxstream._retry import RetryPolicy

pytestmark = pytest.mark.anyio




@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize("api_key", ["sk-test-key", None])
async def test_url_credentials_and_an_api_key(
    transport: str, api_key: str | None, anyio_backend: str
) -> None:
    heads: list[bytes] = []

    async def script(sock: anyio.abc.SocketStream, i: int) -> None:
        request = await read_request(sock)
        heads.append(request.head.lower() if request is not None else b"")
        await sock.send(HEAD + text("Hel") + FINISH + b"data: [DONE]\n\n")

    async with upstream(script) as up:
        base = up.base.replace("http://", "http://user:pw@")
        async with fluxstream.AsyncClient(
            base, api_key=api_key, transport=transport, retry=RetryPolicy.off()
        ) as c:
            with anyio.fail_after(5):
                reply = await c.chat.complete(model="m", messages=MSG)
    assert reply.text == "Hel"
    basic = base64.b64encode(b"user:pw")
    expected = b"basic " + basic.lower()  # the URL's credentials, as httpx sends them
    auth = [line for line in heads[0].split(b"\r\n") if line.startswith(b"authorization:")]
    assert auth == [b"authorization: " + expected]
