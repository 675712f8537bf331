"""Assistant-prefix continuation: the server as a provider that honours ``"prefix": true``.

A client resuming a broken stream re-requests with the partial text ``P`` as a last assistant
message ``{"role": "assistant", "content": P, "prefix": true}``; the server answers the
original request's reply ``T`` from ``len(P)`` on. Over real sockets (raw httpx), on asyncio and
trio, plus a few pure checks of the script.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest
from test_server_support import (
    TOOLS,
    Event,
    accumulate,
    araw_exchange,
    assert_matches,
    chat,
    parse_sse,
)

from fluxstream.server import (
    CONTINUATION_HEADER,
    Server,
    build_script,
    continuation_prefix,
    expected_reply,
    serve,
    strip_prefix,
)

URL = "/v1/chat/completions"
EMOJI = "👋🏽"  # two code points: a waving hand and a skin-tone modifier


def continuation(body: dict[str, Any], text: Any, **message: Any) -> dict[str, Any]:
    """``body`` with the assistant prefix message appended (``prefix: true`` unless given)."""
    last = {"role": "assistant", "content": text, "prefix": True, **message}
    return {**body, "messages": [*body["messages"], last]}


def content_deltas(events: list[Event]) -> list[str]:
    out = []
    for event in events:
        if event.data and event.data != "[DONE]":
            for choice in json.loads(event.data).get("choices", []):
                if "content" in choice["delta"] and choice["delta"]["content"]:
                    out.append(choice["delta"]["content"])
    return out


# -- pure: the script -------------------------------------------------------------------------


def test_detection_and_strip() -> None:
    body = chat()
    assert continuation_prefix(body) is None
    assert continuation_prefix(continuation(body, "Echo")) == "Echo"
    assert continuation_prefix(continuation(body, None)) == ""
    parts = [{"type": "text", "text": "Ec"}, {"type": "text", "text": "ho"}]
    assert continuation_prefix(continuation(body, parts)) == "Echo"
    for truthy in (1, "yes"):
        assert continuation_prefix(continuation(body, "Echo", prefix=truthy)) == "Echo"
    for falsy in (False, 0, None, ""):
        assert continuation_prefix(continuation(body, "Echo", prefix=falsy)) is None
    assert continuation_prefix(continuation(body, "Echo", role="user")) is None
    assert strip_prefix(continuation(body, "Echo")) == body
    assert strip_prefix(body) == body
    assert expected_reply(strip_prefix(continuation(body, "Ec"))) == expected_reply(body)


def test_every_prefix_length_in_the_script() -> None:
    body = chat("héllo wörld 你好 🙂 x y z", max_tokens=200, reasoning_effort="high")
    original = build_script(body)
    text = original.choices[0].text
    assert EMOJI in text and "你好" in text and "é" in text
    for cut in range(len(text) + 1):
        script = build_script(continuation(body, text[:cut]))
        (choice,) = script.choices
        assert choice.text == text[cut:]
        assert choice.reasoning_deltas == () and not script.reasoning
        assert script.prefix == text[:cut]
        assert (script.id, script.usage) == (original.id, original.usage)
        # the first delta is the rest of the cut one, then the original deltas unchanged
        rest, deltas = choice.text_deltas, original.choices[0].text_deltas
        assert all(rest)
        if rest:
            assert rest[1:] == deltas[len(deltas) - len(rest) + 1 :]
            assert deltas[-len(rest)].endswith(rest[0])


@pytest.mark.parametrize(("extra", "cap"), [("", 24), (",fill-max-tokens", 40)],
                         ids=["answer", "filled"])
def test_prefix_as_input_counts_only_the_deltas_after_the_prefix(extra: str, cap: int) -> None:
    """A provider counts a prefill as input: a continuation asked for the cap minus the
    deltas its prefix holds whole ends exactly where the uninterrupted reply does, whatever
    the cut (between deltas, inside one, inside an emoji, before a whitespace delta); a delta
    the prefix holds part of is generated again, from where the prefix stops."""
    deltas = build_script(chat(max_tokens=cap), extra).choices[0].text_deltas
    assert len(deltas) == cap
    whole = "".join(deltas)
    for cut in range(1, len(whole)):
        prefix = whole[:cut]
        held = sum(1 for end in itertools.accumulate(map(len, deltas)) if end <= cut)
        asked = continuation(chat(max_tokens=cap - held), prefix)
        (choice,) = build_script(asked, "prefix-as-input" + extra).choices
        assert prefix + choice.text == whole, cut
        assert len(choice.text_deltas) == cap - held  # what it was asked for, no more
        if held:  # without the profile the prefix counts against the cap: it ends sooner
            (plain,) = build_script(asked, extra).choices
            assert prefix + plain.text != whole


# -- over sockets ------------------------------------------------------------------------------


async def stream(
    client: httpx.AsyncClient, body: dict[str, Any], **headers: str
) -> tuple[httpx.Response, list[Event]]:
    response = await client.post(URL, json=body, headers=headers)
    assert response.status_code == 200
    parsed = parse_sse(response.content)
    assert not parsed.partial
    return response, parsed.events


@pytest.mark.anyio
async def test_every_prefix_length_gives_exactly_the_rest(aserver: Server) -> None:
    body = chat("Hello wörld, 你好", stream_options={"include_usage": True})
    original = expected_reply(body)
    text = original.text
    assert EMOJI in text and "你好" in text and "é" in text
    deltas = list(build_script(body).choices[0].text_deltas)
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        for cut in range(len(text) + 1):
            request = continuation(body, text[:cut])
            response, events = await stream(client, request)
            assert response.headers[CONTINUATION_HEADER] == "continued"
            acc = accumulate(events)
            assert acc.text[0] == text[cut:], cut
            assert_matches(acc, expected_reply(request))
            assert (acc.usage, acc.finish[0], acc.done) == (original.usage, "stop", True)
            assert acc.reasoning == {}
            # a new stream: ids from 1, retry on the first event
            assert [e.id for e in events] == [str(i) for i in range(1, len(events) + 1)]
            assert events[0].retry == "50"
            first = json.loads(events[0].data or "")
            assert first["id"] == original.id
            assert first["choices"][0]["delta"]["role"] == "assistant"
            got = content_deltas(events)
            if got:  # remainder of the cut delta, then the following deltas unchanged
                assert (
                    deltas[-len(got)].endswith(got[0])
                    and got[1:] == deltas[len(deltas) - len(got) + 1 :]
                )
    assert aserver.records.requests[-1].json == continuation(body, text)


@pytest.mark.anyio
async def test_cut_inside_the_emoji_and_multibyte(aserver: Server) -> None:
    body = chat(max_tokens=8)
    text = expected_reply(body).text
    hand = text.index(EMOJI) + 1  # between the hand and the skin-tone modifier
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        _, events = await stream(client, continuation(body, text[:hand]))
        assert content_deltas(events) == ["\U0001f3fd"]
        nihao = text.index("你好") + 1
        _, events = await stream(client, continuation(body, text[:nihao]))
        assert "".join(content_deltas(events)) == text[nihao:]
        assert content_deltas(events)[0] == "好"


@pytest.mark.anyio
@pytest.mark.parametrize("profile", ["openai", "reasoning", "crlf,multiline,heartbeats,azure"])
async def test_reasoning_is_not_repeated_and_profiles_frame_as_usual(
    aserver: Server, profile: str
) -> None:
    body = chat(max_tokens=10)
    hdr = {"X-Fluxstream-Profile": profile}
    text = expected_reply(body, profile).text
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        for cut in (0, 3, 20, len(text)):
            request = continuation(body, text[:cut])
            response, events = await stream(client, request, **hdr)
            acc = accumulate(events)
            assert acc.text[0] == text[cut:] and acc.reasoning == {}
            assert_matches(acc, expected_reply(request, profile))
            assert b"reasoning_content" not in response.content
            assert (b"\r\n" in response.content) == ("crlf" in profile)


@pytest.mark.anyio
async def test_prefix_not_matching_answers_the_whole_reply(aserver: Server) -> None:
    body = chat(max_tokens=10, reasoning_effort="high")
    text = expected_reply(body).text
    hand = text.index(EMOJI)
    wrong = [
        "Nope",
        text[:5] + "X",
        text + "more",
        text[:hand] + "👋🏿",  # another skin tone
        text[1:],
    ]
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        plain, _ = await stream(client, body)
        for prefix in wrong:
            request = continuation(body, prefix)
            response, events = await stream(client, request)
            assert response.headers[CONTINUATION_HEADER] == "ignored"
            assert response.content == plain.content  # the original answer, byte for byte
            assert expected_reply(request) == expected_reply(body)
            assert_matches(accumulate(events), expected_reply(request))
            assert accumulate(events).reasoning  # an ignoring provider reasons as usual
        # and without a continuation message there is no such header
        assert CONTINUATION_HEADER.lower() not in plain.headers


@pytest.mark.anyio
@pytest.mark.parametrize(
    "extra", [{"tools": TOOLS}, {"n": 2}, {"tools": TOOLS, "n": 2}], ids=["tools", "n2", "both"]
)
async def test_tools_and_several_choices_ignore_the_prefix(
    aserver: Server, extra: dict[str, Any]
) -> None:
    body = chat(max_tokens=10, stream_options={"include_usage": True}, **extra)
    text = expected_reply(body).text
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        plain, _ = await stream(client, body)
        for prefix in ("", text[:4], "Echo: caf"):
            request = continuation(body, prefix)
            response, events = await stream(client, request)
            assert response.headers[CONTINUATION_HEADER] == "ignored"
            assert response.content == plain.content
            assert_matches(accumulate(events), expected_reply(body))
            assert expected_reply(request) == expected_reply(body)


@pytest.mark.anyio
async def test_prefix_echo_profile(aserver: Server) -> None:
    body = chat(max_tokens=12)
    text = expected_reply(body).text
    hand = text.index(EMOJI) + 1
    cuts = [0, 1, 5, 11, 12, 13, 30, hand, len(text)]
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        for cut in cuts:
            prefix = text[:cut]
            overlap = prefix[-12:] if prefix else ""
            for profile in ("prefix-echo", "prefix-echo,multiline,nospace"):
                request = continuation(body, prefix)
                _, events = await stream(client, request, **{"X-Fluxstream-Profile": profile})
                acc = accumulate(events)
                assert acc.text[0] == overlap + text[cut:]
                assert_matches(acc, expected_reply(request, profile))
                assert len(overlap) == min(12, cut)
                if overlap:  # the overlap is its own delta, before the continuation
                    assert content_deltas(events)[0] == overlap
            # prefix-echo changes nothing for an ordinary request or an ignored prefix
            _, events = await stream(client, body, **{"X-Fluxstream-Profile": "prefix-echo"})
            assert accumulate(events).text[0] == text
        _, events = await stream(
            client, continuation(body, "Nope"), **{"X-Fluxstream-Profile": "prefix-echo"}
        )
        assert accumulate(events).text[0] == text


@pytest.mark.anyio
async def test_prefix_echo_as_server_default_and_model_suffix(anyio_backend: str) -> None:
    body = chat(max_tokens=8)
    text = expected_reply(body).text
    request = continuation(body, text[:15])
    want = text[3:15] + text[15:]
    async with (
        serve(profile="prefix-echo,crlf") as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        response, events = await stream(client, request)
        assert response.headers["x-fluxstream-profile"] == "crlf,prefix-echo"
        assert accumulate(events).text[0] == want
        suffixed = {**request, "model": "fluxstream-echo@prefix-echo"}
        _, events = await stream(client, suffixed, **{"X-Fluxstream-Profile": "openai"})
        assert accumulate(events).text[0] == want
        _, events = await stream(client, request, **{"X-Fluxstream-Profile": "openai"})
        assert accumulate(events).text[0] == text[15:]


@pytest.mark.anyio
async def test_determinism(aserver: Server) -> None:
    body = chat(max_tokens=9)
    text = expected_reply(body).text
    request = continuation(body, text[:17])
    reordered = dict(reversed(list(request.items())))
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        first, _ = await stream(client, request)
        again, _ = await stream(client, request)
        other, _ = await stream(client, reordered)
    assert first.content == again.content == other.content
    assert build_script(request) == build_script(reordered)
    assert expected_reply(request) == expected_reply(reordered)


@pytest.mark.anyio
async def test_non_streaming_continuation(aserver: Server) -> None:
    body = chat(max_tokens=9, stream=False, reasoning_effort="high")
    text = expected_reply(body).text
    request = continuation(body, text[:10])
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        response = await client.post(URL, json=request)
    data = response.json()
    message = data["choices"][0]["message"]
    assert message["content"] == text[10:] == expected_reply(request).text
    assert "reasoning_content" not in message
    assert data["usage"] == expected_reply(body).usage == expected_reply(request).usage
    assert response.headers[CONTINUATION_HEADER] == "continued"


@pytest.mark.anyio
async def test_last_event_id_within_a_continuation(aserver: Server) -> None:
    body = chat(max_tokens=10)
    text = expected_reply(body).text
    request = continuation(body, text[:8])
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        _, full = await stream(client, request)
        _, rest = await stream(client, request, **{"Last-Event-ID": "3"})
    assert [(e.id, e.data) for e in rest] == [(e.id, e.data) for e in full[3:]]


@pytest.mark.anyio
async def test_resume_after_drop_with_attempt_key(aserver: Server) -> None:
    """The client's scenario: drop mid-stream, continue with the partial text, same key."""
    body = chat(max_tokens=20, stream_options={"include_usage": True})
    original = expected_reply(body)
    hdr = {
        "X-Fluxstream-Attempt-Key": "resume-1",
        "X-Fluxstream-Fault": "fail-first=1,drop-after=700",
    }
    dropped = await araw_exchange(aserver.port, URL, body, hdr)
    assert not dropped.complete
    partial = accumulate(parse_sse(dropped.body).events).text[0]
    assert partial and original.text.startswith(partial) and partial != original.text
    request = continuation(body, partial)
    resumed = await araw_exchange(aserver.port, URL, request, hdr)
    assert resumed.complete and resumed.status == 200
    assert aserver.records.requests[-1].attempt == 2
    acc = accumulate(parse_sse(resumed.body).events)
    assert acc.text[0] == original.text[len(partial) :]
    acc.text[0] = partial + acc.text[0]
    assert_matches(acc, original)
    # without the key, the different body is a first attempt: the fault still applies
    again = await araw_exchange(
        aserver.port, URL, request, {"X-Fluxstream-Fault": "fail-first=1,drop-after=50"}
    )
    assert not again.complete and aserver.records.requests[-1].attempt == 1


@pytest.mark.anyio
async def test_faults_apply_to_continuations(aserver: Server) -> None:
    body = chat(max_tokens=10)
    text = expected_reply(body).text
    request = continuation(body, text[:6])
    clean = await araw_exchange(aserver.port, URL, request)
    assert clean.complete
    dropped = await araw_exchange(
        aserver.port, URL, request, {"X-Fluxstream-Fault": "drop-after=120"}
    )
    assert not dropped.complete and dropped.body == clean.body[:120]
    by_events = await araw_exchange(
        aserver.port, URL, request, {"X-Fluxstream-Fault": "drop-after-events=2"}
    )
    assert not by_events.complete and len(parse_sse(by_events.body).events) == 2
    hdr = {"X-Fluxstream-Attempt-Key": "cont-2", "X-Fluxstream-Fault": "fail-first=2,status=503"}
    async with httpx.AsyncClient(base_url=aserver.url, timeout=10) as client:
        codes = [
            (await client.post(URL, json=b, headers=hdr)).status_code
            for b in (body, request, request)
        ]
    assert codes == [503, 503, 200]
    assert [r.attempt for r in aserver.records.requests[-3:]] == [1, 2, 3]
