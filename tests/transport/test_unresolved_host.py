"""A host name that does not resolve says so, in words, on every transport; it is not retried.

It read ``Unknown error -2`` on the default transport (aiohttp's resolver error through
``os.strerror``) and ``[Errno -2] Name or service not known`` on httpx, after three attempts.
Now both say ``could not resolve host 'api.example.invalid': Name or service not known`` as an
``APIConnectionError``, after one attempt: a name that does not exist stays so. A temporary
failure of the resolver (``EAI_AGAIN``) is retried as any connect error is.

The resolver is the standard library's on both transports (aiohttp's ``ThreadedResolver``,
anyio's), so the test answers for it instead of asking this machine's DNS.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

import fluxstream
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APIConnectionError

pytestmark = pytest.mark.asyncio

TRANSPORTS = ("aiohttp", "httpx")
MSG = [{"role": "user", "content": "hi"}]
FAST = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names under ``.invalid`` fail as a resolver says "no such name" (``EAI_NONAME``), or,
    under ``.again.invalid``, "try again" (``EAI_AGAIN``); the names asked are listed."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.endswith(".again.invalid"):
            asked.append(name)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if name.endswith(".invalid"):
            asked.append(name)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


async def attempt(host: str, transport: str) -> tuple[BaseException | None, Any]:
    async with fluxstream.AsyncClient(
        f"http://{host}/v1", api_key="sk-k", transport=transport, retry=FAST
    ) as client:
        stream = client.chat.stream(model="m", messages=MSG)
        try:
            async with stream:
                async for _ in stream:
                    pass
        except APIConnectionError as exc:
            return exc, stream
        return None, stream


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_name_that_does_not_resolve_says_so_and_is_not_retried(
    transport: str, resolver: list[str]
) -> None:
    started = time.monotonic()
    raised, stream = await attempt("api.example.invalid", transport)
    assert raised is not None, f"{transport}: no error"
    assert str(raised) == (
        "could not resolve host 'api.example.invalid': Name or service not known"
    ), f"{transport}: {raised}"
    assert "Unknown error" not in str(raised) and "Errno" not in str(raised)
    assert stream.stats.attempts == 1, f"{transport}: {stream.stats.attempts} attempts"
    assert resolver == ["api.example.invalid"]
    assert stream.outcome is fluxstream.Outcome.FAILED
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_resolver_that_says_try_again_is_retried(
    transport: str, resolver: list[str]
) -> None:
    raised, stream = await attempt("api.again.invalid", transport)
    assert raised is not None
    assert str(raised) == (
        "could not resolve host 'api.again.invalid': Temporary failure in name resolution"
    ), f"{transport}: {raised}"
    assert stream.stats.attempts == 3, f"{transport}: {stream.stats.attempts} attempts"
