"""What a caller or a token supplies never forges a log line nor floods the log.

A content key comes from the caller, or from a resume token that came back from a browser or
another worker; the model name from the request body, which a token carries too. Logged
with ``%s``, a key holding a line break wrote a line of its own (``CRITICAL ... forged``) into
the service's log, and a 10 KB key was written whole on every retry and resume. They are
logged as the relay logs keys now: ``repr`` (escaped, on one line), cut.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import one_line, show_key
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "tell me a story"}]
FORGED = "\nCRITICAL:fluxstream:forged line\r\x1b]0;title\x07"
KEY = "key" + FORGED + "k" * 10_000
#: A log line of fluxstream's may quote a key and a reason: never anywhere near a 10 KB key.
MAX_LINE = 1_000


def fluxstream_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("fluxstream")]


def assert_clean(lines: list[str]) -> None:
    assert lines
    for line in lines:
        assert "\n" not in line and "\r" not in line and "\x1b" not in line, line[:200]
        assert len(line) < MAX_LINE, line[:200]


def test_show_key_escapes_and_cuts() -> None:
    shown = show_key(KEY)
    assert "\n" not in shown and "\x1b" not in shown and len(shown) < 80
    assert show_key("plain-key") == "'plain-key'"
    assert show_key(10**5000) == "<int>"  # never str() of what a token holds


def test_one_line_escapes_and_cuts() -> None:
    assert one_line("HTTP 404: gone") == "HTTP 404: gone"
    line = one_line("HTTP 400:" + FORGED + "x" * 5000)
    assert "\n" not in line and "\x1b" not in line and len(line) < 320
    assert one_line("caf\u00e9 \u4f60\u597d") == "caf\u00e9 \u4f60\u597d"  # readable text stays
    # the limit holds after escaping: a text of control characters is not 4x as long
    assert len(one_line("\x00" * 5000)) <= 303 and len(one_line("\x1b" * 299)) <= 303
    assert one_line("a\nb") == "a\\nb"


async def test_a_stream_opened_logs_key_and_model_on_one_short_line(
    server: ServerThread, caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="fluxstream")
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        with anyio.fail_after(10):
            reply = await client.chat.complete(
                model="m" + FORGED, messages=MSG, content_key=KEY, max_tokens=5
            )
    assert reply.content_key == KEY  # the key itself is untouched
    assert_clean(fluxstream_lines(caplog))


async def test_a_resume_after_a_drop_logs_the_key_on_one_short_line(
    server: ServerThread, caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="fluxstream")
    headers = {"X-Fluxstream-Fault": "drop-after-events=3,fail-first=1",
               "X-Fluxstream-Attempt-Key": "log-resume"}
    async with fluxstream.AsyncClient(
        server.base_url, resume=ResumePolicy(restart=True), retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(10):
            reply = await client.chat.complete(
                model="m", messages=MSG, content_key=KEY, max_tokens=20, extra_headers=headers
            )
    assert reply.outcome == "done"
    lines = fluxstream_lines(caplog)
    assert any("dropped" in line and "resuming" in line for line in lines), lines
    assert_clean(lines)


async def test_a_retry_logs_the_key_on_one_short_line(
    server: ServerThread, caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="fluxstream")
    headers = {"X-Fluxstream-Fault": "fail-first=1,status=503",
               "X-Fluxstream-Attempt-Key": "log-retry"}
    retry = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.01)
    async with fluxstream.AsyncClient(server.base_url, retry=retry) as client:
        with anyio.fail_after(10):
            reply = await client.chat.complete(
                model="m", messages=MSG, content_key=KEY, max_tokens=5, extra_headers=headers
            )
    assert reply.outcome == "done"
    lines = fluxstream_lines(caplog)
    assert any("retry" in line for line in lines), lines
    assert_clean(lines)


async def test_a_forged_token_key_is_logged_escaped(
    server: ServerThread, caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    """The key of a token is whatever the token's holder wrote."""
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        stream = client.chat.stream(model="m", messages=MSG, max_tokens=5)
        token: dict[str, Any] = stream.resume_token()
        await stream.aclose()
        token["key"] = KEY
        token["body"] = {**token["body"], "model": "m" + FORGED}
        caplog.set_level(logging.DEBUG, logger="fluxstream")
        with anyio.fail_after(10):
            async with client.chat.resume(token, resume=ResumePolicy(restart=True)) as resumed:
                await resumed.complete()
    assert_clean(fluxstream_lines(caplog))


@pytest.mark.asyncio_only  # the relay runs on asyncio
async def test_a_takeover_refused_logs_why_on_one_short_line(
    server: ServerThread, caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    """What the relay stored (in Redis: whoever can write there wrote it) is input too. A
    stored token this client cannot resume is refused with an error whose text quotes the
    validator (several lines, the token's own values in it); the warning that the takeover
    was refused must still be one short line."""
    from fluxstream.relay import Entry, MemoryReplyLog

    log = MemoryReplyLog(lease=0.2)
    key = "stored" + FORGED
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        stream = client.chat.stream(model="m", messages=MSG, max_tokens=5, content_key=key)
        token: dict[str, Any] = stream.resume_token()
        await stream.aclose()
        token["reply"] = {**token["reply"], "usage": "x" + FORGED + "y" * 5000}
        await log._create(key, "gone", {k: v for k, v in token.items() if k != "reply"})
        entry = Entry(1, (fluxstream.TextDelta(key, 0, 0, "Hel"),))
        await log._append(key, "gone", entry, token=token, final=False)
        before = len(server.records.requests)
        caplog.set_level(logging.DEBUG, logger="fluxstream")
        with anyio.fail_after(20):
            seen = [item async for item in log.follow(key, takeover=client)]
    assert server.records.requests[before:] == []
    assert seen[-1].event.outcome is fluxstream.Outcome.TRUNCATED
    lines = fluxstream_lines(caplog)
    assert any("cannot take" in line for line in lines), lines
    assert_clean(lines)
