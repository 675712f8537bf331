"""The usage estimate (``reply.usage_estimate``, :mod:`fluxstream._usage`) against llama.cpp on a
real model: within 10% of the server's own count, for a reply read to its end without usage
and for a stream stopped early (compared with the same request run to the end)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from llama_server import LlamaServer

import fluxstream

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODEL = "gemma-3-270m"
PROMPT = "Write a short story about a lighthouse keeper and a storm, in plain English."
#: Greedy and uncached: the same request gives the same tokens every time.
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 7, "max_tokens": 160, "cache_prompt": False}
MESSAGES = [{"role": "user", "content": PROMPT}]


def _client(server: LlamaServer) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-local",
                                  retry=fluxstream.RetryPolicy.off())


def _tokens(server: LlamaServer, text: str) -> int:
    """How many tokens the server's own tokenizer makes of ``text``."""
    root = server.base_url.removesuffix("/v1")
    answer = httpx.post(f"{root}/tokenize", json={"content": text}, timeout=30)
    answer.raise_for_status()
    return len(answer.json()["tokens"])


def _within(estimate: int, real: int, share: float = 0.10) -> bool:
    return abs(estimate - real) <= share * real


@pytest.mark.timeout(600)  # the first test of a session waits for the server to start
async def test_an_estimate_is_within_ten_percent_of_the_servers_usage(
    llama_server: LlamaServer,
) -> None:
    async with _client(llama_server) as client:
        full = await client.chat.complete(model=MODEL, messages=MESSAGES, **GREEDY)
        assert full.usage is not None and full.usage.completion_tokens
        real = full.usage.completion_tokens
        # The same request, the same content key, without usage: estimated.
        bare = await client.chat.complete(
            model=MODEL, messages=MESSAGES, include_usage=False,
            content_key=full.content_key, **GREEDY,
        )
        assert bare.text == full.text and bare.usage is None
        estimate = bare.usage_estimate
        assert estimate is not None and estimate.estimated
        assert _within(estimate.output_tokens, real), (estimate.output_tokens, real)
        # Input tokens: the earlier reply of this content key reported them.
        assert estimate.input_tokens == full.usage.prompt_tokens

        # Stopped early: the estimate of what arrived, against the same request's tokens.
        async with client.chat.stream(model=MODEL, messages=MESSAGES,
                                      content_key=full.content_key, **GREEDY) as stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta) and len(stream.reply.text) > len(
                    full.text
                ) // 2:
                    break
        stopped = stream.reply
    assert stopped.outcome is fluxstream.Outcome.CANCELLED and stopped.usage is None
    assert full.text.startswith(stopped.text)
    partial = stopped.usage_estimate
    assert partial is not None and partial.input_tokens == full.usage.prompt_tokens
    prefix_tokens = _tokens(llama_server, stopped.text)
    assert _within(partial.output_tokens, prefix_tokens), (partial.output_tokens, prefix_tokens)
    assert partial.output_tokens < real
    print(f"estimate: whole reply {estimate.output_tokens} vs usage {real}; stopped "
          f"{partial.output_tokens} vs {prefix_tokens} tokens of its text")
