"""A client made without a key, with none in the API's environment variable, is refused.

``AsyncClient()`` with nothing set sent every request to api.openai.com without a key (three
times: the 401 aside, a failure was retried). Now it is refused when it is made, as
openai-python refuses it, with a typed error (``MissingAPIKeyError``: a ``FluxstreamError`` and
a ``ValueError``) naming the variable to set; nothing is sent. A client needs no key when its
base URL is on this machine (loopback: 127.0.0.0/8, ::1, localhost), when credentials are
carried (``user:pw@`` in the URL, a credential header in ``headers=``), or when the caller says
so (``api_key=""``: a gateway that needs none). ``anthropic_client()`` names
``ANTHROPIC_API_KEY`` and never takes ``OPENAI_API_KEY`` instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import fluxstream
from fluxstream._endpoints import anthropic_client
from fluxstream.errors import FluxstreamError, MissingAPIKeyError

VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
             "GEMINI_API_KEY")


@pytest.fixture(autouse=True)
def nothing_set(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield


def test_a_client_with_nothing_set_is_refused_naming_the_variable() -> None:
    with pytest.raises(MissingAPIKeyError) as info:
        fluxstream.AsyncClient()
    error = info.value
    assert isinstance(error, FluxstreamError) and isinstance(error, ValueError)
    assert error.variable == "OPENAI_API_KEY"
    assert str(error).startswith("no API key for https://api.openai.com/v1: set OPENAI_API_KEY")
    assert 'api_key=""' in str(error)


@pytest.mark.parametrize("url", [
    "https://api.example.com/v1", "http://10.0.0.5:8000/v1", "http://192.168.1.2/v1",
    "http://localhost.example.com/v1", "http://128.0.0.1/v1", "http://[::2]/v1",
])
def test_a_server_elsewhere_needs_a_key(url: str) -> None:
    with pytest.raises(MissingAPIKeyError, match="set OPENAI_API_KEY"):
        fluxstream.AsyncClient(url)


def test_an_empty_variable_is_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with pytest.raises(MissingAPIKeyError):
        fluxstream.AsyncClient("https://api.example.com/v1")


def test_the_query_of_the_url_is_not_shown() -> None:
    """A query may carry a key of its own (``?key=...``): the message leaves it out."""
    with pytest.raises(MissingAPIKeyError) as info:
        fluxstream.AsyncClient("https://api.example.com/v1?key=SECRET-IN-QUERY")
    assert "SECRET-IN-QUERY" not in str(info.value)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8787/v1", "http://127.9.9.9/v1", "http://localhost:8787/v1",
    "HTTP://LOCALHOST/v1", "http://[::1]:8787/v1",
])
def test_a_loopback_server_needs_no_key(url: str) -> None:
    client = fluxstream.AsyncClient(url)
    assert "api_key=none" in repr(client)


@pytest.mark.parametrize("kwargs", [
    {"base_url": "https://user:pw@api.example.com/v1"},
    {"headers": {"Authorization": "Bearer gateway-token"}},
    {"headers": {"api-key": "azure-key"}},
    {"headers": {"x-api-key": "anthropic-key"}},
    {"api_key": ""},
])
def test_credentials_carried_otherwise_or_none_on_purpose_need_no_key(
    kwargs: dict[str, object],
) -> None:
    kwargs.setdefault("base_url", "https://api.example.com/v1")
    fluxstream.AsyncClient(**kwargs)  # type: ignore[arg-type]


def test_a_key_in_the_environment_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert "api_key=set" in repr(fluxstream.AsyncClient())


def test_moving_a_keyless_client_off_this_machine_is_refused_too() -> None:
    """``base_url`` assigned is taken as the constructor takes it."""
    client = fluxstream.AsyncClient("http://127.0.0.1:8787/v1")
    with pytest.raises(MissingAPIKeyError):
        client.base_url = "https://api.example.com/v1"
    assert client.base_url == "http://127.0.0.1:8787/v1"
    keyed = fluxstream.AsyncClient("http://127.0.0.1:8787/v1", api_key="sk-k")
    keyed.base_url = "https://api.example.com/v1"
    gateway = fluxstream.AsyncClient("http://127.0.0.1:8787/v1", api_key="")
    gateway.base_url = "https://api.example.com/v1"


def test_anthropic_client_names_its_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-not-for-anthropic")
    with pytest.raises(MissingAPIKeyError) as info:
        anthropic_client()
    assert info.value.variable == "ANTHROPIC_API_KEY"
    assert "https://api.anthropic.com/v1" in str(info.value)
    assert "api_key=none" in repr(anthropic_client("http://127.0.0.1:8787"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    assert "api_key=set" in repr(anthropic_client())
    assert "api_key=none" in repr(anthropic_client(api_key=""))
    anthropic_client(headers={"Authorization": "Bearer gateway"})


@pytest.mark.anyio
async def test_fallbacks_without_a_key_still_stream(server: object, anyio_backend: str) -> None:
    """The client a fallback is asked through takes its upstream's key or none: an upstream
    without a key (a local server, a gateway) still serves a stream."""
    base = server.base_url  # type: ignore[attr-defined]
    client = fluxstream.AsyncClient(
        "http://127.0.0.1:9/v1", fallbacks=[fluxstream.Upstream(base)],
        retry=fluxstream.RetryPolicy.off(),
    )
    async with client:
        reply = await client.chat.complete(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.text
