"""The ``fluxstream_upstream`` fixture: scripted replies in every API, scheduled faults, and
what it records, seen from plain httpx and from fluxstream's own client."""

from __future__ import annotations

import json
import re
import socket
import time

import httpx
import pytest
from waiting import WITHIN

import fluxstream
from fluxstream.testing import ScriptError, Upstream


def chat_body(**extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}


def sse_data(text: str) -> list[object]:
    """The JSON data of each event of a Chat Completions stream."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def chat_text(events: list[object], choice: int = 0) -> str:
    return "".join(
        c["delta"].get("content") or ""
        for e in events if isinstance(e, dict)
        for c in e.get("choices", []) if c["index"] == choice
    )


def test_a_scripted_reply_is_what_the_stream_says(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text="Paris is the capital of France.", reasoning="Easy one.",
                              usage={"prompt_tokens": 11, "completion_tokens": 7})
    response = httpx.post(fluxstream_upstream.base_url + "/chat/completions",
                          json=chat_body(stream_options={"include_usage": True}))
    events = sse_data(response.text)
    assert chat_text(events) == "Paris is the capital of France."
    reasoning = "".join(c["delta"].get("reasoning_content") or ""
                        for e in events for c in e.get("choices", []))  # type: ignore[union-attr]
    assert reasoning == "Easy one."
    usage = events[-1]["usage"]  # type: ignore[index]
    counts = (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])
    assert counts == (11, 7, 18)


def test_several_choices_each_say_their_own_text(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(choices=["Yes.", {"text": "No.", "finish_reason": "length"}])
    events = sse_data(httpx.post(fluxstream_upstream.base_url + "/chat/completions",
                                 json=chat_body(n=2)).text)
    assert (chat_text(events, 0), chat_text(events, 1)) == ("Yes.", "No.")
    finishes = {c["index"]: c["finish_reason"] for e in events for c in e["choices"]  # type: ignore[index]
                if c["finish_reason"]}
    assert finishes == {0: "stop", 1: "length"}


ASK = [{"role": "user", "content": "weather?"}]


@pytest.mark.anyio
@pytest.mark.parametrize("api", ["chat_completions", "responses", "anthropic_messages", "gemini"])
async def test_every_api_says_the_scripted_text_and_tool_call(
    fluxstream_upstream: Upstream, api: str
) -> None:
    fluxstream_upstream.reply(text="Let me check.", tool_calls=[
        {"name": "weather", "arguments": {"city": "Zürich", "days": 2}}])
    async with fluxstream.AsyncClient(base_url=fluxstream_upstream.base_urls[api],
                                      api_key="sk-test") as client:
        if api == "chat_completions":
            reply = await client.chat.complete(model="m", messages=ASK)
        elif api == "responses":
            reply = await client.responses.complete(model="m", input=ASK)
        elif api == "anthropic_messages":
            reply = await client.messages.complete(model="m", messages=ASK, max_tokens=50)
        else:
            reply = await client.gemini.complete(
                model="gemini-2.0-flash", contents=[{"role": "user", "parts": [{"text": "?"}]}])
    choice = reply.choices[0]
    assert choice.text == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in choice.tool_calls] == [
        ("weather", {"city": "Zürich", "days": 2})]


def test_replies_with_times_come_first_then_the_standing_one(
    fluxstream_upstream: Upstream,
) -> None:
    up = fluxstream_upstream
    up.reply(text="always")
    up.reply(text="first", times=1)
    up.reply(text="second", times=1)
    said = [chat_text(sse_data(httpx.post(up.base_url + "/chat/completions",
                                          json=chat_body()).text)) for _ in range(3)]
    assert said == ["first", "second", "always"]


def test_faults_are_a_schedule_taken_request_by_request(fluxstream_upstream: Upstream) -> None:
    up = fluxstream_upstream
    up.reply(text="one two three four five six")
    up.fail(429, retry_after=3)
    up.drop(after_events=2)
    with httpx.Client() as client:
        first = client.post(up.base_url + "/chat/completions", json=chat_body())
        assert first.status_code == 429 and first.headers["retry-after"] == "3"
        assert first.json()["error"]["type"]  # worded as OpenAI words it
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(up.base_url + "/chat/completions", json=chat_body()).read()
        third = client.post(up.base_url + "/chat/completions", json=chat_body())
    assert chat_text(sse_data(third.text)) == "one two three four five six"
    assert [r.ending for r in up.wait_responses(3)] == ["complete", "dropped", "complete"]


def test_a_529_on_the_messages_path_is_anthropics_overloaded_error(
    fluxstream_upstream: Upstream,
) -> None:
    fluxstream_upstream.fail(529)
    response = httpx.post(fluxstream_upstream.url + "/v1/messages",
                          json={"model": "c", "max_tokens": 5, "messages": []})
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"


def test_a_drop_after_bytes_cuts_the_body_there(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.drop(after_bytes=100)
    received = bytearray()
    with httpx.stream("POST", fluxstream_upstream.base_url + "/chat/completions",
                      json=chat_body()) as response, pytest.raises(httpx.RemoteProtocolError):
        for chunk in response.iter_bytes():
            received += chunk
    assert len(received) == 100


def test_a_malformed_chunk_is_refused_by_the_client(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.malformed_chunk(after_bytes=50)
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(fluxstream_upstream.base_url + "/chat/completions", json=chat_body())


def test_an_error_event_ends_the_scripted_text(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text="Partial answer", error=True)
    events = sse_data(httpx.post(fluxstream_upstream.base_url + "/chat/completions",
                                 json=chat_body()).text)
    assert chat_text(events) == "Partial answer"
    assert "error" in events[-1]  # type: ignore[operator]


def test_an_error_event_fault_comes_after_half_the_reply(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text="a b c d")
    fluxstream_upstream.error_event()
    events = sse_data(httpx.post(fluxstream_upstream.base_url + "/chat/completions",
                                 json=chat_body()).text)
    assert chat_text(events) == "a b" and "error" in events[-1]  # type: ignore[operator]


def test_slow_first_token_sends_the_head_then_waits(fluxstream_upstream: Upstream) -> None:
    # 1.5 s: the head's own lateness on a loaded machine (the server's thread, this one)
    # never eats the gap the check needs (0.4 s against a 0.2 s margin could)
    fluxstream_upstream.slow_first_token(1.5)
    start = time.monotonic()
    with httpx.stream("POST", fluxstream_upstream.base_url + "/chat/completions",
                      json=chat_body()) as response:
        head = time.monotonic() - start
        body = response.read()
        total = time.monotonic() - start
    assert response.status_code == 200 and b"[DONE]" in body
    assert total >= 1.5 and head < total - 0.2


def test_a_stall_pauses_the_stream_with_heartbeats(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.stall(0.3, after_events=2, heartbeat=0.1)
    start = time.monotonic()
    text = httpx.post(fluxstream_upstream.base_url + "/chat/completions", json=chat_body()).text
    assert time.monotonic() - start >= 0.3
    assert ": ping" in text


def test_close_after_reply_closes_the_kept_alive_connection(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.close_after_reply()
    body = json.dumps({"model": "m", "messages": []}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    received = b""
    with socket.create_connection(("127.0.0.1", fluxstream_upstream.port), timeout=5.0) as sock:
        sock.sendall(head + body)
        for _ in range(1000):  # until the server closes: it does, unannounced
            data = sock.recv(65536)
            if not data:
                break
            received += data
    response_head = received.partition(b"\r\n\r\n")[0].lower()
    assert response_head.startswith(b"http/1.1 200") and b"connection: close" not in response_head
    assert b'"chat.completion"' in received


def test_requests_are_recorded_with_secrets_masked(fluxstream_upstream: Upstream) -> None:
    headers = {"Authorization": "Bearer sk-live-abcdef123456", "x-goog-api-key": "AIza-secret-1",
               "api-key": "azure-secret-2", "Cookie": "session=secret-3", "X-Trace": "t-1"}
    httpx.post(fluxstream_upstream.base_url + "/chat/completions?key=AIza-query-4",
               json=chat_body(), headers=headers)
    request = fluxstream_upstream.request
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.json["messages"] == [{"role": "user", "content": "hi"}]
    assert request.header("authorization") == "Bearer <redacted>"
    for name in ("x-goog-api-key", "api-key", "cookie"):
        assert request.header(name) == "<redacted>"
    assert request.header("x-trace") == "t-1"
    assert len(fluxstream_upstream.requests) == 1
    for secret in ("sk-live-abcdef123456", "AIza-secret-1", "azure-secret-2", "secret-3",
                   "AIza-query-4"):
        assert secret not in repr(fluxstream_upstream.requests)
        assert any(secret in s for s in fluxstream_upstream.secrets)


def test_a_cancel_is_recorded_when_the_client_goes_away(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.stall(30.0)  # a reply that never completes while the test runs
    closed_at = 0.0
    with httpx.stream("POST", fluxstream_upstream.base_url + "/chat/completions",
                      json=chat_body()) as response:
        reads = response.iter_bytes()
        next(reads)
        closed_at = time.monotonic()
    record = fluxstream_upstream.wait_disconnect_sync(WITHIN)
    assert not record.completed and record.request == 1
    assert 0 <= record.time - closed_at < 5.0  # seen at once, not at the 30 s stall's end


@pytest.mark.anyio
async def test_the_same_fixture_serves_an_async_test(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text="async hello")
    async with httpx.AsyncClient() as client:
        response = await client.post(fluxstream_upstream.base_url + "/chat/completions",
                                     json=chat_body())
    assert chat_text(sse_data(response.text)) == "async hello"


def _first_other_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
            address = str(probe.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_the_server_listens_on_loopback_only(fluxstream_upstream: Upstream) -> None:
    assert fluxstream_upstream.host == "127.0.0.1"
    assert fluxstream_upstream.base_url.startswith("http://127.0.0.1:")
    other = _first_other_address()
    if other is None:
        pytest.skip("this machine has no address besides loopback")
    with pytest.raises(OSError), socket.create_connection((other, fluxstream_upstream.port),
                                                          timeout=1.0):
        pass


def test_each_test_gets_its_own_port(fluxstream_upstream: Upstream) -> None:
    with Upstream() as another:
        assert another.port != fluxstream_upstream.port


@pytest.mark.parametrize(("call", "field"), [
    (lambda up: up.reply(txt="x"), "'txt'"),
    (lambda up: up.reply(tool_calls=[{"name": "f", "arguments": "x"}]),
     "'tool_calls[0].arguments'"),
    (lambda up: up.reply(usage={"prompt_tokens": "7"}), "'usage.prompt_tokens'"),
    (lambda up: up.reply(text="a", choices=["b"]), "'text'"),
    (lambda up: up.reply(text="a", times=0), "'times'"),
    (lambda up: up.drop(), "'after_events'"),
    (lambda up: up.drop(after_events=-1), "'after_events'"),
    (lambda up: up.stall(-1.0), "'seconds'"),
    (lambda up: up.fail(200), "'status'"),
    (lambda up: up.fail(101), "'status'"),
    (lambda up: up.fail(429, body="xml"), "'body'"),
    (lambda up: up.fault("drip"), "'drip'"),
    (lambda up: up.fault("raw", spec="drop-after=x"), "'drop-after'"),
])
def test_a_malformed_script_or_fault_names_its_field(
    fluxstream_upstream: Upstream, call: object, field: str
) -> None:
    with pytest.raises(ScriptError, match=re.escape(field)):
        call(fluxstream_upstream)  # type: ignore[operator]
    assert fluxstream_upstream.requests == []


@pytest.mark.fluxstream(api_key="sk-the-right-one", profile="azure")
def test_the_marker_sets_the_key_the_upstream_wants_and_its_quirks(
    fluxstream_upstream: Upstream,
) -> None:
    url = fluxstream_upstream.base_url + "/chat/completions"
    wrong = httpx.post(url, json=chat_body(), headers={"Authorization": "Bearer sk-wrong"})
    assert wrong.status_code == 401
    right = httpx.post(url, json=chat_body(), headers={"Authorization": "Bearer sk-the-right-one"})
    assert right.status_code == 200
    assert '"prompt_filter_results"' in right.text  # Azure's first event
