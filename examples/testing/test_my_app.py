"""Testing an app built on openai-python against real faults, with fluxstream's testing kit.

``pip install fluxstream`` and ``pytest`` find the ``fluxstream_upstream`` fixture: a server on
127.0.0.1 for this test alone, whose reply the test scripts and whose faults it schedules."""

from __future__ import annotations

import logging

import openai
import pytest
from my_app import ask, first_words

from fluxstream.testing import (
    Upstream,
    assert_no_secret_logged,
    assert_no_text_twice,
    assert_upstream_closed,
)

ANSWER = "Paris is the capital of France, on the Seine."


@pytest.fixture
def client(fluxstream_upstream: Upstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=fluxstream_upstream.base_url, api_key="sk-test-0123456789",
                         max_retries=0)


def test_the_app_survives_a_drop_mid_reply(fluxstream_upstream: Upstream,
                                           client: openai.OpenAI) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    fluxstream_upstream.drop(after_events=4)  # the first request breaks mid-reply
    shown: list[str] = []
    assert ask(client, "capital of France?", shown.append) == ANSWER
    assert_no_text_twice(shown, ANSWER)
    assert [r.ending for r in fluxstream_upstream.wait_responses(2)] == ["dropped", "complete"]


@pytest.mark.fluxstream(reply={"text": ANSWER}, faults=[
    {"kind": "fail", "status": 503, "retry_after": 0},
    {"kind": "drop", "after_bytes": 300},
])
def test_the_app_survives_an_outage_then_a_drop(fluxstream_upstream: Upstream,
                                                client: openai.OpenAI) -> None:
    shown: list[str] = []
    with pytest.raises(openai.InternalServerError):  # the app leaves a 503 to its caller
        ask(client, "capital of France?", shown.append)
    assert ask(client, "capital of France?", shown.append) == ANSWER
    assert_no_text_twice(shown, ANSWER)


def test_leaving_early_closes_the_upstream_connection(fluxstream_upstream: Upstream,
                                                      client: openai.OpenAI) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    fluxstream_upstream.stall(30.0, after_events=4)  # the rest would come much later
    assert first_words(client, "capital of France?", 2) == "Paris is"
    assert_upstream_closed(fluxstream_upstream)


def test_the_api_key_never_reaches_the_log(fluxstream_upstream: Upstream, client: openai.OpenAI,
                                           caplog: pytest.LogCaptureFixture) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    fluxstream_upstream.drop(after_events=2)
    with caplog.at_level(logging.DEBUG):
        ask(client, "capital of France?", lambda text: None)
    assert "broke after" in caplog.text
    assert_no_secret_logged(caplog, fluxstream_upstream)
    assert fluxstream_upstream.request.header("authorization") == "Bearer <redacted>"
