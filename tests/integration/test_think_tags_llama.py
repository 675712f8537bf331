"""Reasoning in ``<think>`` tags from llama.cpp's own server on a real model.

llama.cpp puts a model's reasoning into ``content`` when it does not parse it out (here the
Gemma GGUF falls back to ChatML, which names no reasoning, and the request says
``reasoning_format: none``); a GBNF grammar that starts with ``<think>`` makes even the small
model reason in tags, cut across tokens as a real model cuts them (``<``, ``t``, ``hi``, ``n``,
``k``, ``>``). Chat Completions and Responses take the grammar; llama.cpp's ``/v1/messages``
ignores it, so Anthropic's format is held by the embedded server's tests instead.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from llama_server import LlamaServer

import fluxstream
from fluxstream import ReasoningDelta, TextDelta

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

GRAMMAR = 'root ::= "<think>" [a-z ]{5,40} "</think>" [a-zA-Z0-9 .]{3,40}'
#: llama.cpp extensions: the grammar, reasoning left in the text, a fresh prompt each time.
EXTRA = {"grammar": GRAMMAR, "reasoning_format": "none", "cache_prompt": False}
PROMPT = "What is 2+2?"


def _client(server: LlamaServer, **options: Any) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-none",
                                  retry=fluxstream.RetryPolicy.off(), **options)


async def _read(stream: fluxstream.ReplyStream) -> dict[str, str]:
    shown = {"text": "", "reasoning": ""}
    async with stream:
        async for event in stream:
            if isinstance(event, TextDelta | ReasoningDelta):
                assert event.offset == len(shown[event.type])
                shown[event.type] += event.text
    return shown


def _call(client: fluxstream.AsyncClient, api: str, **options: Any) -> fluxstream.ReplyStream:
    if api == "responses":
        return client.responses.stream(model="gemma", input=PROMPT, max_output_tokens=40,
                                       **EXTRA, **options)
    return client.chat.stream(model="gemma", messages=[{"role": "user", "content": PROMPT}],
                              max_tokens=40, **EXTRA, **options)


@pytest.mark.timeout(600)  # the first test of a session waits for the server to start
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_tagged_reasoning_from_llama_cpp_is_reasoning(
    llama_server: LlamaServer, api: str
) -> None:
    async with _client(llama_server) as client:
        raw = await _read(_call(client, api))
        split = await _read(_call(client, api, think_tags=True))
    tagged = re.fullmatch(r"<think>([a-z ]{5,40})</think>([a-zA-Z0-9 .]{3,40})", raw["text"])
    assert tagged is not None, raw  # the server sent the tags in the text, as asked
    # Greedy sampling: the same request, read with the tags split out, is the same text.
    assert split == {"text": tagged[2], "reasoning": tagged[1]}


async def test_a_length_cut_inside_the_tags_is_unclosed_reasoning(
    llama_server: LlamaServer,
) -> None:
    async with _client(llama_server, think_tags=True) as client:
        reply = await client.chat.complete(
            model="gemma", messages=[{"role": "user", "content": PROMPT}], max_tokens=8, **EXTRA)
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.text == "" and choice.reasoning and choice.reasoning_unclosed
