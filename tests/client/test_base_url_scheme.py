"""A base URL that cannot work is refused when the client is made, in the user's terms.

``AsyncClient("127.0.0.1:8787/v1")`` (the scheme forgotten) was accepted, and every request
then failed with httpx's ``UnsupportedProtocol: Request URL has an unsupported protocol
'127.0.0.1://'``, wrapped in an ``APIConnectionError`` and retried. It is now a ``ValueError``
at once, saying what is missing; the URL is shown without credentials or query (either may
hold a key).
"""

from __future__ import annotations

import pytest

import fluxstream
from fluxstream._endpoints import anthropic_client

NO_SCHEME = [
    "127.0.0.1:8787/v1",
    "localhost:8787/v1",
    "api.openai.com/v1",
    "ftp://example.com/v1",
    "ws://127.0.0.1:8787/v1",
    "//127.0.0.1:8787/v1",
]


@pytest.mark.parametrize("url", NO_SCHEME)
def test_a_base_url_without_http_is_refused_at_once(url: str) -> None:
    for make in (fluxstream.AsyncClient, anthropic_client):
        with pytest.raises(ValueError) as info:
            make(url)
        message = str(info.value)
        assert message.startswith("base_url needs http:// or https://: got "), message
        assert url.split("/v1")[0] in message


@pytest.mark.parametrize(
    "url",
    ["user:SECRET@127.0.0.1:8787/v1", "ftp://user:SECRET@h/v1",
     "127.0.0.1:8787/v1?api-key=SECRET", "http:///v1?key=SECRET", "http://user:SECRET@/v1"],
)
def test_the_refusal_never_shows_credentials(url: str) -> None:
    with pytest.raises(ValueError) as info:
        fluxstream.AsyncClient(url)
    assert "SECRET" not in str(info.value) and "SECRET" not in repr(info.value)
    assert "base_url needs" in str(info.value)


def test_a_url_without_a_host_is_refused() -> None:
    with pytest.raises(ValueError, match="base_url needs a host"):
        fluxstream.AsyncClient("http:///v1")


def test_the_environment_is_named_when_the_url_came_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "127.0.0.1:8787/v1")
    with pytest.raises(ValueError, match=r"^base_url \(from OPENAI_BASE_URL\) needs http"):
        fluxstream.AsyncClient()


@pytest.mark.parametrize("url", ["HTTP://127.0.0.1:8787/v1", "https://[::1]:8787/v1"])
def test_good_urls_are_accepted(url: str) -> None:
    fluxstream.AsyncClient(url)


@pytest.mark.parametrize("url", ["http://h:port/v1", "http://u:SECRET@h:99x/v1"])
def test_a_url_that_does_not_parse_is_refused_without_credentials(url: str) -> None:
    with pytest.raises(ValueError, match=r"^base_url is not a URL: got ") as info:
        fluxstream.AsyncClient(url)
    assert "SECRET" not in str(info.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://127.0.0.1:0/v1",
                                 "http://u:SECRET@127.0.0.1:70000/v1"])
def test_a_port_out_of_range_is_refused_at_once(url: str) -> None:
    """Accepted, it failed on every request with a raw ``ValueError`` (aiohttp) or a raw
    ``ExceptionGroup`` (httpx)."""
    for make in (fluxstream.AsyncClient, anthropic_client):
        with pytest.raises(ValueError, match=r"^base_url needs a port from 1 to 65535") as info:
            make(url)
        assert "SECRET" not in str(info.value)
