"""A credential given as a header, or in the base URL, never reaches a log or an error.

The README's way to authenticate to a gateway is a header (``headers={"Authorization":
...}``, ``x-api-key``, Azure's ``api-key``, a proxy's ``Proxy-Authorization``, a cookie). Such
a value read from a file keeps its newline: httpx refused it with ``LocalProtocolError:
Illegal header value b'Bearer sk-...\\n'``, the whole secret in the error's text and in
httpcore's DEBUG log. Every credential-bearing header is now treated as ``api_key`` is:
surrounding whitespace dropped (HTTP drops it anyway), any other character a header cannot
carry refused when the client (or the stream) is made, with a ``ValueError`` that does not
show the value. And a password in ``base_url`` appeared in httpx's INFO log (``HTTP Request:
POST http://user:pw@...``): the client now takes the credentials out of the URL and sends
them as Basic authentication itself, so no HTTP library ever sees them in a URL.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream._endpoints import anthropic_client
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import ServerThread
from fluxstream.server.responder import SECRET_HEADERS
from fluxstream.testing import Upstream

pytestmark = pytest.mark.anyio

SECRET = "SECRET-0123456789"
MSG = [{"role": "user", "content": "hi"}]
#: Header names that carry credentials, as gateways spell them.
CREDENTIAL_HEADERS = [
    "Authorization", "x-api-key", "api-key", "Proxy-Authorization", "Cookie",
    "Ocp-Apim-Subscription-Key", "X-Auth-Token",
]
#: Characters a header value cannot carry, inside the value (not around it).
UNSENDABLE = ["\n", "\r\n", "\x00", "\x7f", "\u00e9", "\u2028"]


def value_for(name: str) -> str:
    return f"Bearer {SECRET}" if "auth" in name.lower() else f"sess={SECRET}"


def assert_no_secret(caplog: pytest.LogCaptureFixture, *texts: str) -> None:
    for record in caplog.records:
        assert SECRET not in record.getMessage(), (record.name, record.getMessage()[:300])
    assert SECRET not in caplog.text
    for text in texts:
        assert SECRET not in text


@pytest.fixture(autouse=True)
def _debug_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    """Every logger (httpx, httpcore, aiohttp, fluxstream) at DEBUG, as a service might."""
    caplog.set_level(logging.DEBUG)


@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize("padding", ["\n", "\r\n", " \t"])
@pytest.mark.parametrize("name", CREDENTIAL_HEADERS)
async def test_a_credential_header_with_a_trailing_newline_is_sent_and_never_logged(
    server: ServerThread, caplog: pytest.LogCaptureFixture, name: str, padding: str,
    transport: str, anyio_backend: str,
) -> None:
    value = value_for(name)
    with Upstream() as upstream:  # records what was sent, every credential masked
        async with fluxstream.AsyncClient(
            upstream.base_url, headers={name: value + padding}, transport=transport,
            retry=RetryPolicy.off(),
        ) as client:
            with anyio.fail_after(10):
                reply = await client.chat.complete(model="m", messages=MSG, max_tokens=5)
        received = upstream.records.requests[-1].header(name)
        sent = upstream.secrets
    assert reply.outcome == "done"
    if name.lower() in SECRET_HEADERS:  # the server masks what it knows to be a credential
        assert received is not None and received.endswith("<redacted>")
        assert value in sent  # trimmed, then sent as it was given
    else:
        assert received == value
    assert_no_secret(caplog)


@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
async def test_a_request_credential_header_with_a_trailing_newline_is_sent_and_never_logged(
    server: ServerThread, caplog: pytest.LogCaptureFixture, endpoint: str, transport: str,
    anyio_backend: str,
) -> None:
    args: dict[str, Any] = {"chat": {"messages": MSG}, "responses": {"input": "hi"},
                            "messages": {"messages": MSG, "max_tokens": 5}}[endpoint]
    headers = {"Api-Key": f"{SECRET}\n", "Proxy-Authorization": f"Basic {SECRET}\r\n"}
    with Upstream() as upstream:  # records what was sent, every credential masked
        async with fluxstream.AsyncClient(
            upstream.base_url, transport=transport, retry=RetryPolicy.off()
        ) as client:
            with anyio.fail_after(10):
                reply = await getattr(client, endpoint).complete(
                    model="m", extra_headers=headers, **args
                )
        received = upstream.records.requests[-1].header("api-key")
        sent = upstream.secrets
    assert reply.outcome == "done"
    assert received == "<redacted>"
    assert SECRET in sent and f"Basic {SECRET}" in sent  # trimmed, then sent
    assert_no_secret(caplog)


@pytest.mark.parametrize("character", UNSENDABLE, ids=[repr(c) for c in UNSENDABLE])
@pytest.mark.parametrize("name", CREDENTIAL_HEADERS)
def test_a_client_header_that_cannot_be_sent_is_refused_without_showing_it(
    caplog: pytest.LogCaptureFixture, name: str, character: str
) -> None:
    value = value_for(name).replace("-", character, 1)
    for make in (fluxstream.AsyncClient, anthropic_client):
        with pytest.raises(ValueError) as info:
            make("http://127.0.0.1:9/v1", headers={name: value})
        assert name in str(info.value)  # which header, so the user can find it
        assert_no_secret(caplog, str(info.value), repr(info.value))


@pytest.mark.parametrize("character", UNSENDABLE, ids=[repr(c) for c in UNSENDABLE])
@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
async def test_a_request_header_that_cannot_be_sent_is_refused_without_showing_it(
    server: ServerThread, caplog: pytest.LogCaptureFixture, endpoint: str, character: str,
    anyio_backend: str,
) -> None:
    args: dict[str, Any] = {"chat": {"messages": MSG}, "responses": {"input": "hi"},
                            "messages": {"messages": MSG, "max_tokens": 5}}[endpoint]
    headers = {"Authorization": f"Bearer {SECRET}{character}x"}
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        before = len(server.records.requests)
        with pytest.raises(ValueError) as info:
            getattr(client, endpoint).stream(model="m", extra_headers=headers, **args)
        assert_no_secret(caplog, str(info.value), repr(info.value))
        stream = getattr(client, endpoint).stream(model="m", **args)
        with anyio.fail_after(10):
            async with stream:
                async for _ in stream:
                    break
            token = stream.resume_token()
        with pytest.raises(ValueError) as info:
            getattr(client, endpoint).resume(
                token, extra_headers=headers, resume=ResumePolicy(restart=True)
            )
        assert_no_secret(caplog, str(info.value), repr(info.value))
    assert len(server.records.requests) == before + 1  # only the good stream was sent


def test_a_non_ascii_value_of_another_header_is_left_to_the_send() -> None:
    """A non-ASCII value of a header that is not a credential is refused when the request is
    sent (``RequestHeaderError``, on every transport); only its surrounding whitespace goes
    here."""
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", headers={"X-Title": "caf\u00e9\n"})
    assert client._headers["x-title"] == "caf\u00e9"


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_credential_given_as_bytes_is_checked_as_a_string_is(
    server: ServerThread, caplog: pytest.LogCaptureFixture, transport: str, anyio_backend: str,
) -> None:
    """httpx takes header values as bytes too: a key read from a file in binary mode. Its
    trailing newline went unchecked (httpx quoted the value in its error; aiohttp raised a
    bare ``TypeError`` quoting it)."""
    value = f"Bearer {SECRET}".encode()
    async with fluxstream.AsyncClient(
        server.base_url, headers={"Authorization": value + b"\n"}, transport=transport,
        retry=RetryPolicy.off(),
    ) as client:
        with anyio.fail_after(10):
            reply = await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    assert reply.outcome == "done"
    assert server.records.requests[-1].header("authorization") == "Bearer <redacted>"
    for bad in (value + b"\x01x", value + "\u00e9".encode()):
        with pytest.raises(ValueError) as info:
            fluxstream.AsyncClient(server.base_url, headers={"x-api-key": bad})
        assert_no_secret(caplog, str(info.value), repr(info.value))
    assert_no_secret(caplog)


@pytest.mark.parametrize(
    "name", ["Authorization: Bearer " + SECRET, "X-Key\n" + SECRET, "", "X Key", "X-K\u00e9y"]
)
def test_a_header_name_no_transport_can_send_is_refused_without_showing_it(
    caplog: pytest.LogCaptureFixture, name: str
) -> None:
    """A name with a colon or a space is most often a whole ``Name: value`` line passed as
    the name; only the part before the first character a name cannot hold is shown."""
    with pytest.raises(ValueError, match="header name") as info:
        fluxstream.AsyncClient("http://127.0.0.1:9/v1", headers={name: "v"})
    assert_no_secret(caplog, str(info.value), repr(info.value))


# ------------------------------------------------------------------ credentials in base_url


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_password_in_base_url_is_never_logged(
    server: ServerThread, caplog: pytest.LogCaptureFixture, transport: str, anyio_backend: str,
) -> None:
    base = server.base_url.replace("http://", f"http://user:{SECRET}@")
    async with fluxstream.AsyncClient(
        base, transport=transport, retry=RetryPolicy.off()
    ) as client:
        assert SECRET not in client.base_url and SECRET not in repr(client)
        with anyio.fail_after(10):
            reply = await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    assert reply.outcome == "done"
    assert server.records.requests[-1].header("authorization") == "Basic <redacted>"
    assert_no_secret(caplog)


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_a_password_in_base_url_is_not_in_a_connection_error(
    caplog: pytest.LogCaptureFixture, transport: str, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(
        f"http://user:{SECRET}@127.0.0.1:9/v1", transport=transport, retry=RetryPolicy.off()
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(10), pytest.raises(fluxstream.APIConnectionError) as info:
            async with stream:
                pass
    assert_no_secret(caplog, str(info.value), repr(info.value), str(info.value.__cause__))
