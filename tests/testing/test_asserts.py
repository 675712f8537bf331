"""The one-line assertions: each passes on the property and fails, saying where, on its
violation (a repeat, a loss, a connection left open, a secret in a log), and none prints a
secret."""

from __future__ import annotations

import logging

import httpx
import pytest
from waiting import WITHIN, until_sync

from fluxstream.testing import (
    Upstream,
    assert_no_secret_logged,
    assert_no_text_twice,
    assert_upstream_closed,
)

TEXT = "Hello — 你好 👋🏽, the reply goes on."


def test_a_whole_text_shown_once_passes() -> None:
    assert_no_text_twice(["Hello — ", "你好 👋🏽,", " the reply goes on."], TEXT)
    assert_no_text_twice("Hello — 你好", TEXT, complete=False)


def test_a_repeat_after_a_drop_fails_naming_the_offset() -> None:
    shown = TEXT[:10] + TEXT[5:]  # a retry showed "— 你好 " again
    with pytest.raises(AssertionError, match=r"text shown twice: at offset 10 .* from offset 5"):
        assert_no_text_twice(shown, TEXT)


def test_a_retry_from_the_start_fails_as_a_repeat() -> None:
    with pytest.raises(AssertionError, match=r"text shown twice: at offset 8 .* offset 0"):
        assert_no_text_twice([TEXT[:8], TEXT], TEXT)


def test_a_lost_piece_fails() -> None:
    with pytest.raises(AssertionError, match="text lost"):
        assert_no_text_twice(TEXT[:8], TEXT)
    with pytest.raises(AssertionError, match="differs from the expected text at offset 6"):
        assert_no_text_twice(TEXT[:6] + TEXT[8:], TEXT)


def test_a_cancel_that_closes_the_connection_passes(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.stall(30.0)
    with httpx.stream("POST", fluxstream_upstream.base_url + "/chat/completions",
                      json={"model": "m", "messages": [], "stream": True}) as response:
        reads = response.iter_bytes()
        next(reads)
    record = assert_upstream_closed(fluxstream_upstream)
    assert not record.completed


def test_a_connection_left_open_fails(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.stall(30.0)
    with httpx.Client() as client, client.stream(
        "POST", fluxstream_upstream.base_url + "/chat/completions",
        json={"model": "m", "messages": [], "stream": True},
    ) as response:
        reads = response.iter_bytes()
        next(reads)  # still reading: the connection is open
        with pytest.raises(AssertionError, match=r"saw no client close mid-reply within 0\.2 s"):
            assert_upstream_closed(fluxstream_upstream, timeout=0.2)


def test_a_whole_reply_then_a_close_is_not_a_mid_reply_close(
    fluxstream_upstream: Upstream,
) -> None:
    httpx.post(fluxstream_upstream.base_url + "/chat/completions",
               json={"model": "m", "messages": [], "stream": True})
    # the server's thread records the answer's end after its last write, maybe after the
    # client read it: waited for, so the message below names it on a loaded machine too
    until_sync(lambda: fluxstream_upstream.responses, "the answer's end recorded")
    with pytest.raises(AssertionError, match=r"answers ended: complete"):
        assert_upstream_closed(fluxstream_upstream, timeout=0.2)
    assert assert_upstream_closed(fluxstream_upstream, timeout=WITHIN, mid_reply=False).completed


def test_a_clean_log_passes(fluxstream_upstream: Upstream,
                            caplog: pytest.LogCaptureFixture) -> None:
    httpx.post(fluxstream_upstream.base_url + "/chat/completions",
               headers={"Authorization": "Bearer sk-live-0123456789"},
               json={"model": "m", "messages": []})
    logging.getLogger("app").warning("request to %s failed", fluxstream_upstream.base_url)
    assert_no_secret_logged(caplog, fluxstream_upstream)
    assert_no_secret_logged(caplog.text, "sk-live-0123456789")


@pytest.mark.parametrize("logged", [
    "Bearer sk-live-0123456789", "sk-live-0123456789", "headers: {'x-goog-api-key': 'AIza-98765'}",
])
def test_a_secret_in_a_log_fails_without_printing_it(
    fluxstream_upstream: Upstream, caplog: pytest.LogCaptureFixture, logged: str,
) -> None:
    httpx.post(fluxstream_upstream.base_url + "/chat/completions",
               headers={"Authorization": "Bearer sk-live-0123456789",
                        "x-goog-api-key": "AIza-98765"},
               json={"model": "m", "messages": []})
    logging.getLogger("app").info("sending %s", logged)
    with pytest.raises(AssertionError) as raised:
        with caplog.at_level(logging.INFO):
            logging.getLogger("app").info("sending %s", logged)
            assert_no_secret_logged(caplog, fluxstream_upstream)
    message = str(raised.value)
    assert "reached log record" in message and "(app, INFO)" in message
    assert "sk-live-0123456789" not in message and "AIza-98765" not in message


def test_a_secret_in_an_exception_logged_fails() -> None:
    record = logging.LogRecord("app", logging.ERROR, __file__, 1, "request failed", (), None)
    try:
        raise RuntimeError("401 for key sk-live-0123456789")
    except RuntimeError as exc:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    with pytest.raises(AssertionError, match="reached log record 0"):
        assert_no_secret_logged([record], "sk-live-0123456789")


def test_nothing_to_look_for_is_a_mistake_not_a_pass() -> None:
    with pytest.raises(AssertionError, match="no secret to look for"):
        assert_no_secret_logged("anything")
