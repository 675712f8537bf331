"""Reasoning inside the text between tags, end to end over 127.0.0.1: every API, a resume by
``Last-Event-ID`` cut inside a tag, a failover continued after the answer started, the relay.

The embedded server's ``think-tags`` profile sends its reasoning in the text as
``<think>…</think>`` with the tags cut across deltas, as llama.cpp without a reasoning parser
does; the reply must hold exactly the reasoning and the answer, and the offsets of both
channels must follow on from each other whatever the reads were.
"""

from __future__ import annotations

from typing import Any

import pytest

import fluxstream
from fluxstream import Handoff, Outcome, ReasoningDelta, TextDelta, ThinkTags, Upstream
from fluxstream.relay import MemoryReplyLog
from fluxstream.server import Server, ServerThread, script_for

pytestmark = pytest.mark.anyio

PROFILE = {"X-Fluxstream-Profile": "think-tags"}
USER = [{"role": "user", "content": "Weather in Zürich? 你好"}]
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat_completions": ("chat", {"model": "m", "messages": USER}),
    "responses": ("responses", {"model": "m", "input": "Weather in Zürich? 你好"}),
    "anthropic_messages": ("messages", {"model": "m", "messages": USER, "max_tokens": 512}),
    "gemini": ("gemini", {"model": "m", "contents": [
        {"role": "user", "parts": [{"text": "Weather in Zürich? 你好"}]}]}),
}


def split_script(api: str, params: dict[str, Any]) -> tuple[str, str]:
    """(answer, reasoning) of the tagged text the server streams for ``params``."""
    tagged = script_for(api, params, "think-tags").choices[0].text
    assert tagged.startswith("<think>") and "</think>\n\n" in tagged
    reasoning, _, answer = tagged.removeprefix("<think>").partition("</think>\n\n")
    return answer, reasoning


def client_for(server: Server | ServerThread, api: str, **kwargs: Any) -> fluxstream.AsyncClient:
    root = server.url + "/v1beta" if api == "gemini" else server.base_url
    return fluxstream.AsyncClient(base_url=root, api_key="k", **kwargs)


async def read(stream: fluxstream.ReplyStream) -> tuple[dict[str, str], list[Any]]:
    """Each channel as a renderer writing ``buf[offset:] = text`` shows it, and the events;
    every delta must start where the last one of its channel ended."""
    shown = {"text": "", "reasoning": ""}
    events: list[Any] = []
    async with stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, TextDelta | ReasoningDelta):
                assert event.offset == len(shown[event.type]), event
                shown[event.type] += event.text
    return shown, events


@pytest.mark.parametrize("api", list(CALLS))
async def test_every_api_gives_the_tagged_reasoning_as_reasoning(aserver: Server, api: str) -> None:
    name, params = CALLS[api]
    answer, reasoning = split_script(api, params)
    headers = {**PROFILE, "X-Fluxstream-Fault": "write-size=5"}  # reads cut inside tags
    async with client_for(aserver, api, think_tags=True) as client:
        stream = getattr(client, name).stream(**params, extra_headers=headers)
        shown, _ = await read(stream)
    assert shown == {"text": answer, "reasoning": reasoning}
    reply = stream.reply
    assert reply.outcome is Outcome.DONE
    assert (reply.text, reply.choices[0].reasoning) == (answer, reasoning)
    assert not reply.choices[0].reasoning_unclosed


async def test_a_call_may_turn_the_client_s_tags_off_or_on(aserver: Server) -> None:
    params = CALLS["chat_completions"][1]
    tagged = script_for("chat", params, "think-tags").choices[0].text
    answer, _ = split_script("chat", params)
    async with client_for(aserver, "chat", think_tags=True) as client:
        off = await client.chat.complete(**params, extra_headers=PROFILE, think_tags=False)
        client.think_tags = False
        plain = await client.chat.complete(**params, extra_headers=PROFILE)
        on = await client.chat.complete(
            **params, extra_headers=PROFILE, think_tags=ThinkTags(names=("think",)))
    assert off.text == plain.text == tagged and off.choices[0].reasoning is None
    assert on.text == answer


async def test_a_cut_inside_the_reasoning_is_marked_unclosed(aserver: Server) -> None:
    params = {**CALLS["chat_completions"][1], "max_tokens": 4}
    async with client_for(aserver, "chat", think_tags=True) as client:
        reply = await client.chat.complete(**params, extra_headers=PROFILE)
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and choice.text == ""
    assert choice.reasoning and choice.reasoning_unclosed


@pytest.mark.parametrize("events", [2, 5, 9])
async def test_a_resume_by_last_event_id_inside_a_tag_shows_nothing_twice(
    aserver: Server, events: int
) -> None:
    params = CALLS["chat_completions"][1]
    answer, reasoning = split_script("chat", params)
    headers = {**PROFILE, "X-Fluxstream-Fault": f"drop-after-events={events},fail-first=1",
               "X-Fluxstream-Attempt-Key": f"tags-resume-{events}"}
    async with client_for(aserver, "chat", think_tags=True) as client:
        stream = client.chat.stream(**params, extra_headers=headers)
        shown, _ = await read(stream)
    assert stream.reply.outcome is Outcome.DONE
    assert shown == {"text": answer, "reasoning": reasoning}
    # Cut inside the opening tag nothing was shown yet: a plain retry; past it, a resume.
    assert stream.stats.resumes == (0 if events == 2 else 1)


async def test_a_failover_after_the_answer_started_continues_the_answer() -> None:
    params = CALLS["chat_completions"][1]
    answer, reasoning = split_script("chat", params)
    with ServerThread(profile="think-tags") as primary, \
            ServerThread(profile="think-tags") as fallback:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", think_tags=True,
            fallbacks=[Upstream(fallback.base_url, api_key="k")],
            retry=fluxstream.RetryPolicy.off(), resume=fluxstream.ResumePolicy.off(),
        ) as client:
            stream = client.chat.stream(
                **params, extra_headers={"X-Fluxstream-Fault": "drop-after-events=30"})
            shown, events = await read(stream)
        sent = fallback.records.requests[-1].json["messages"][-1]
    (handoff,) = [e for e in events if isinstance(e, Handoff)]
    assert not handoff.restarted and 0 < handoff.offset < len(answer)
    assert shown == {"text": answer, "reasoning": reasoning}
    # The model is asked to go on after what it sent, its reasoning in its tags included.
    assert sent["role"] == "assistant" and sent["content"].startswith("<think>" + reasoning)


async def test_the_relay_replays_the_split_with_the_same_offsets(aserver: Server) -> None:
    params = CALLS["chat_completions"][1]
    answer, reasoning = split_script("chat", params)
    log = MemoryReplyLog()
    async with client_for(aserver, "chat", think_tags=True) as client:
        stream = client.chat.stream(**params, extra_headers=PROFILE, log=log)
        _, events = await read(stream)
    followed = [item async for item in log.follow(stream.reply.content_key)]
    shown = {"text": "", "reasoning": ""}
    for event in (getattr(item, "event", item) for item in followed):
        if isinstance(event, TextDelta | ReasoningDelta):  # joined by the log: offsets hold
            assert event.offset == len(shown[event.type]), event
            shown[event.type] += event.text
    assert shown == {"text": answer, "reasoning": reasoning}
    assert len([e for e in events if isinstance(e, ReasoningDelta)]) > 1
