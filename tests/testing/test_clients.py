"""The kit serves every client, not only fluxstream's: openai-python (sync and async), the
Anthropic SDK, google-genai, LiteLLM and plain httpx each read the scripted reply through the
``fluxstream_upstream`` fixture, and each meets a scheduled fault as that client meets it."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

import fluxstream
from fluxstream.testing import Upstream, assert_upstream_closed

genai = pytest.importorskip("google.genai")
genai_types = pytest.importorskip("google.genai.types")

ANSWER = "Bonjour, le monde — 你好 👋🏽."
ASK = [{"role": "user", "content": "greet me"}]


def test_openai_python_streams_the_scripted_reply(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text=ANSWER, usage={"prompt_tokens": 3, "completion_tokens": 5})
    client = openai.OpenAI(base_url=fluxstream_upstream.base_url, api_key="sk-test")
    text, usage = "", None
    for chunk in client.chat.completions.create(
        model="gpt-4o", messages=ASK, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    ):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == ANSWER
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (3, 5)


def test_openai_python_reads_tool_calls_and_several_choices(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(choices=[
        {"tool_calls": [{"name": "lookup", "arguments": {"q": "Zürich"}}]},
        {"text": "No tool needed."},
    ])
    client = openai.OpenAI(base_url=fluxstream_upstream.base_url, api_key="sk-test")
    completion = client.chat.completions.create(model="gpt-4o", messages=ASK, n=2)  # type: ignore[arg-type]
    first, second = completion.choices
    call = first.message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, json.loads(call.function.arguments)) == (  # type: ignore[union-attr]
        "lookup", {"q": "Zürich"})
    assert first.finish_reason == "tool_calls"
    assert second.message.content == "No tool needed."


def test_openai_python_retries_a_429_by_its_retry_after(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    fluxstream_upstream.fail(429, retry_after=0)
    client = openai.OpenAI(base_url=fluxstream_upstream.base_url, api_key="sk-test",
                           max_retries=1)
    completion = client.chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == ANSWER
    assert [r.attempt for r in fluxstream_upstream.requests] == [1, 2]


@pytest.mark.anyio
@pytest.mark.asyncio_only  # openai's async client runs on asyncio (and trio via anyio: httpx)
async def test_async_openai_meets_a_drop_as_a_connection_error(
    fluxstream_upstream: Upstream,
) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    fluxstream_upstream.drop(after_events=3)
    client = openai.AsyncOpenAI(base_url=fluxstream_upstream.base_url, api_key="sk-test")
    text = ""
    with pytest.raises(openai.APIConnectionError):
        async for chunk in await client.chat.completions.create(
            model="gpt-4o", messages=ASK, stream=True,  # type: ignore[arg-type]
        ):
            text += chunk.choices[0].delta.content or ""
    assert ANSWER.startswith(text) and 0 < len(text) < len(ANSWER)
    await client.close()


def test_the_anthropic_sdk_streams_thinking_text_and_a_tool_use(
    fluxstream_upstream: Upstream,
) -> None:
    fluxstream_upstream.reply(reasoning="Look it up.", text="Checking.",
                              tool_calls=[{"name": "weather", "arguments": {"city": "Oslo"}}])
    client = anthropic.Anthropic(base_url=fluxstream_upstream.url, api_key="sk-ant-test")
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=200,
                                messages=ASK) as stream:  # type: ignore[arg-type]
        message = stream.get_final_message()
    kinds = [(block.type, getattr(block, "thinking", None) or getattr(block, "text", None)
              or getattr(block, "input", None)) for block in message.content]
    assert kinds == [("thinking", "Look it up."), ("text", "Checking."),
                     ("tool_use", {"city": "Oslo"})]
    assert message.stop_reason == "tool_use"


def test_the_anthropic_sdk_meets_a_529_as_overloaded(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.fail(529, retry_after=0)
    client = anthropic.Anthropic(base_url=fluxstream_upstream.url, api_key="sk-ant-test",
                                 max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20,
                               messages=ASK)  # type: ignore[arg-type]
    assert raised.value.status_code == 529


def test_google_genai_streams_the_scripted_reply(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    client = genai.Client(api_key="AIza-test-key", http_options=genai_types.HttpOptions(
        base_url=fluxstream_upstream.url))
    chunks = client.models.generate_content_stream(model="gemini-2.5-flash", contents="greet me")
    assert "".join(chunk.text or "" for chunk in chunks) == ANSWER
    assert fluxstream_upstream.request.header("x-goog-api-key") == "<redacted>"
    assert "AIza-test-key" in fluxstream_upstream.secrets


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic on LiteLLM's own types
def test_litellm_streams_the_scripted_reply(
    fluxstream_upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiteLLM fetches its model price map from GitHub when first imported unless told to
    # read its bundled copy: the suite talks to 127.0.0.1 only.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    fluxstream_upstream.reply(text=ANSWER)
    response = litellm.completion(model="openai/gpt-4o", messages=ASK, stream=True,
                                  api_base=fluxstream_upstream.base_url, api_key="sk-test")
    text = "".join(chunk.choices[0].delta.content or "" for chunk in response)
    assert text == ANSWER


def test_plain_httpx_leaving_early_closes_the_upstream(fluxstream_upstream: Upstream) -> None:
    fluxstream_upstream.stall(30.0)
    with httpx.stream("POST", fluxstream_upstream.base_url + "/chat/completions",
                      json={"model": "m", "messages": ASK, "stream": True}) as response:
        reads = response.iter_bytes()
        next(reads)
    record = assert_upstream_closed(fluxstream_upstream)
    assert record.bytes_written > 0


@pytest.mark.anyio
async def test_fluxstream_resumes_through_a_drop_on_either_loop(
    fluxstream_upstream: Upstream, anyio_backend: str,
) -> None:
    fluxstream_upstream.reply(text=ANSWER)
    fluxstream_upstream.drop(after_events=4)
    async with fluxstream.AsyncClient(base_url=fluxstream_upstream.base_url,
                                      api_key="sk-test") as client:
        shown: list[Any] = []
        async with client.chat.stream(model="m", messages=ASK) as stream:
            async for delta in stream.text():
                shown.append(delta)
    assert "".join(shown) == ANSWER
    assert fluxstream_upstream.wait_responses(2)[0].ending == "dropped"
