"""Failover onto a real server: an embedded Anthropic Messages primary drops mid-reply and
the llama.cpp server (Chat Completions, Gemma 3 270M) goes on with the reply. What a model
writes cannot be scripted, so this checks what the client owes whatever it writes: one
reply, offsets contiguous (``buf[offset:]`` rebuilds it), the primary's text kept as
delivered, segments naming both upstreams and APIs, and the prefill the fallback was sent.
"""

from __future__ import annotations

import pytest
from llama_server import LlamaServer
from shown_text import read_shown

import fluxstream
from fluxstream import Handoff, Outcome, Upstream
from fluxstream.server import ServerThread

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODEL = "gemma-3-270m"
MSG = [{"role": "user", "content": "Write one sentence about rivers."}]


async def test_messages_primary_drops_and_llama_cpp_goes_on(llama_server: LlamaServer) -> None:
    fallback = Upstream(llama_server.base_url, api="chat_completions", api_key="sk-x",
                        model=MODEL, max_tokens=24, name="llama.cpp")
    with ServerThread(profile="openai", faults="drop-after-events=8") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[fallback],
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=1024,
                                            temperature=0)
            shown, others = await read_shown(stream)
    reply = stream.reply
    assert "reset" not in [e.type for e in others]
    (handoff,) = [e for e in others if isinstance(e, Handoff)]
    assert not handoff.restarted and handoff.upstream == "llama.cpp" and handoff.offset > 0
    assert shown == reply.text and len(shown) >= handoff.offset
    assert reply.outcome in (Outcome.DONE, Outcome.FINISHED)
    first, second = reply.segments
    assert (first.api, second.api, second.upstream) == (
        "anthropic_messages", "chat_completions", "llama.cpp")
    assert first.start == 0 and first.end == second.start == handoff.offset
    assert second.end == len(shown) and second.model == MODEL
