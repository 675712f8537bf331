"""fluxstream against llama.cpp's own HTTP server on a real model, checked against openai-python.

A server nobody here wrote: its framing, its heartbeats (``sse_ping_interval``), its usage
chunks (one per choice with ``n=2``), its 400 for a prompt over the context, and what it does
when a client goes away. Sampling is greedy (temperature 0, fixed seed, ``cache_prompt``
off), so fluxstream and openai-python sent the same request must read the same text. Every
request keeps ``max_tokens`` small: the model runs at tens of tokens per second on two cores.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from llama_server import LlamaServer

import fluxstream
from fluxstream.cli import load_fixture

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

MODEL = "gemma-3-270m"
#: The model echoes and continues this; its reply holds accented letters, guillemets, emoji.
UNICODE_PROMPT = "Répète exactement: «Crème brûlée à Zürich» 🙂🎉"
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 7, "max_tokens": 24}
#: llama.cpp extension: do not reuse a cached prompt prefix, so every request computes the
#: same logits from scratch (a reused cache may differ in the last bits).
NO_CACHE = {"cache_prompt": False}
SECRET = "sk-integration-never-shown"


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _long_prompt(tokens_about: int, seed: int) -> str:
    """A prompt of roughly ``tokens_about`` tokens (one per common word), different per seed."""
    words = ["apple", "river", "stone", "cloud", "music", "garden", "window", "silver", "yellow",
             "forest", "candle", "mirror", "bridge", "ocean", "winter", "summer", "pencil",
             "basket", "rocket", "velvet"]
    rng = random.Random(seed)
    return " ".join(rng.choice(words) for _ in range(tokens_about))


def _client(server: LlamaServer, **options: Any) -> fluxstream.AsyncClient:
    options.setdefault("retry", fluxstream.RetryPolicy.off())
    return fluxstream.AsyncClient(base_url=server.base_url, api_key=SECRET, **options)


@pytest.fixture(scope="module")
def reference(llama_server: LlamaServer) -> dict[str, Any]:
    """What openai-python reads for the Unicode prompt: text, finish reason, final usage."""
    client = openai.OpenAI(base_url=llama_server.base_url, api_key=SECRET, max_retries=0)
    parts: list[str] = []
    finish: str | None = None
    usage: Any = None
    with client.chat.completions.create(
        model=MODEL, messages=_messages(UNICODE_PROMPT), stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True}, extra_body=NO_CACHE, **GREEDY,
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
            usage = chunk.usage or usage
    client.close()
    assert usage is not None and finish is not None
    return {"text": "".join(parts), "finish_reason": finish, "usage": usage}


# ---------------------------------------------------------------------------- text and usage


@pytest.mark.parametrize(
    ("anyio_backend", "mode"),
    [("asyncio", "events"), ("trio", "events"), ("asyncio", "coalesce"), ("trio", "coalesce"),
     ("asyncio", "aiohttp")],
)
async def test_text_and_usage_match_openai_python(
    llama_server: LlamaServer, reference: dict[str, Any], mode: str
) -> None:
    options = {"transport": "aiohttp"} if mode == "aiohttp" else {}
    async with _client(llama_server, **options) as client:
        stream = client.chat.stream(
            model=MODEL, messages=_messages(UNICODE_PROMPT), **GREEDY, **NO_CACHE
        )
        async with stream:
            if mode == "coalesce":
                pieces = [piece async for piece in stream.text(coalesce=0.05)]
                deltas = "".join(pieces)
            else:
                offset = 0
                parts: list[str] = []
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        assert (event.choice, event.offset) == (0, offset)  # no gap, no repeat
                        offset += len(event.text)
                        parts.append(event.text)
                deltas = "".join(parts)
    reply = stream.reply
    text = reference["text"]
    assert any(ord(c) > 0x7F for c in text) and any(ord(c) > 0xFFFF for c in text), text
    assert deltas == reply.text == text
    assert reply.outcome is fluxstream.Outcome.DONE
    assert reply.choices[0].finish_reason == reference["finish_reason"]
    assert reply.skipped_frames == 0
    usage = reference["usage"]
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) \
        == (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
    assert reply.usage.completion_tokens <= GREEDY["max_tokens"]


async def test_complete_returns_the_same_reply(
    llama_server: LlamaServer, reference: dict[str, Any]
) -> None:
    async with _client(llama_server) as client:
        reply = await client.chat.complete(
            model=MODEL, messages=_messages(UNICODE_PROMPT), **GREEDY, **NO_CACHE
        )
    assert reply.text == reference["text"]
    assert reply.outcome is fluxstream.Outcome.DONE


@pytest.mark.parametrize("transport", ["auto", "httpx"])
async def test_back_to_back_streams_on_one_client_all_end_done(
    llama_server: LlamaServer, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp's server closes a kept-alive connection after each stream: the next request,
    already sent on it, is sent again on a new connection, never failed nor retried."""
    caplog.set_level(logging.WARNING)
    outcomes = []
    async with _client(llama_server, transport=transport) as client:  # retries off
        for i in range(10):
            stream = client.chat.stream(
                model=MODEL, messages=_messages(f"Say {i}."), max_tokens=3, temperature=0,
            )
            with anyio.fail_after(60):
                async with stream:
                    async for _ in stream:
                        pass
            outcomes.append(stream.outcome)
            assert stream.stats.attempts == 1
    assert outcomes == [fluxstream.Outcome.DONE] * 10
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


# ---------------------------------------------------------------------------- other formats


async def test_responses_api_matches_openai_python(llama_server: LlamaServer) -> None:
    """llama.cpp also serves ``/v1/responses``: fluxstream's Responses format against
    openai-python's own Responses stream on the same request."""
    params: dict[str, Any] = {"temperature": 0, "max_output_tokens": 16, **NO_CACHE}
    parts: list[str] = []
    usage: Any = None
    oai = openai.AsyncOpenAI(base_url=llama_server.base_url, api_key=SECRET, max_retries=0)
    async with oai:
        ostream = await oai.responses.create(
            model=MODEL, input=UNICODE_PROMPT, stream=True,
            temperature=params["temperature"], max_output_tokens=params["max_output_tokens"],
            extra_body=NO_CACHE,
        )
        async with ostream:
            async for event in ostream:
                if event.type == "response.output_text.delta":
                    parts.append(event.delta)
                elif event.type in ("response.completed", "response.incomplete"):
                    usage = event.response.usage
    async with _client(llama_server) as client:
        reply = await client.responses.complete(model=MODEL, input=UNICODE_PROMPT, **params)
    assert reply.text == "".join(parts) and reply.text
    assert reply.outcome in (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED)
    assert reply.choices[0].finish_reason is not None
    assert usage is not None and reply.usage is not None
    assert getattr(reply.usage, "output_tokens", None) == usage.output_tokens


async def test_messages_api_matches_the_anthropic_sdk(llama_server: LlamaServer) -> None:
    """llama.cpp also serves ``/v1/messages``: fluxstream's Anthropic Messages format against
    the ``anthropic`` SDK's own stream on the same request."""
    anthropic = pytest.importorskip("anthropic")
    # No temperature: recent SDKs no longer take it; the server's default sampling is greedy.
    request: dict[str, Any] = {"model": MODEL, "max_tokens": 16,
                               "messages": _messages(UNICODE_PROMPT)}
    sdk = anthropic.AsyncAnthropic(base_url=llama_server.root_url, api_key=SECRET,
                                   max_retries=0)
    async with sdk.messages.stream(**request, extra_body=NO_CACHE) as astream:
        expected = "".join([piece async for piece in astream.text_stream])
        final = await astream.get_final_message()
    await sdk.close()
    async with _client(llama_server) as client:
        async with client.messages.stream(**request, **NO_CACHE) as stream:
            reply = await stream.until_done()
    assert reply.text == expected and reply.text
    assert reply.outcome in (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED)
    assert reply.choices[0].finish_reason is not None
    assert reply.usage is not None
    assert getattr(reply.usage, "output_tokens", None) == final.usage.output_tokens


# ---------------------------------------------------------------------------- n=2


async def test_two_choices_match_openai_python(llama_server: LlamaServer) -> None:
    """llama.cpp streams the two choices interleaved and sends one usage chunk per choice."""
    params: dict[str, Any] = {**GREEDY, "max_tokens": 8, "n": 2}
    expected: dict[int, list[str]] = {0: [], 1: []}
    finishes: dict[int, str | None] = {}
    usages: list[Any] = []
    oai = openai.AsyncOpenAI(base_url=llama_server.base_url, api_key=SECRET, max_retries=0)
    async with oai:
        async with await oai.chat.completions.create(
            model=MODEL, messages=_messages("Count: one two three"),  # type: ignore[arg-type]
            stream=True, stream_options={"include_usage": True}, extra_body=NO_CACHE, **params,
        ) as ostream:
            async for chunk in ostream:
                for choice in chunk.choices:
                    expected[choice.index].append(choice.delta.content or "")
                    finishes[choice.index] = choice.finish_reason or finishes.get(choice.index)
                if chunk.usage is not None:
                    usages.append(chunk.usage)
    async with _client(llama_server) as client:
        async with client.chat.stream(
            model=MODEL, messages=_messages("Count: one two three"), **params, **NO_CACHE
        ) as stream:
            reply = await stream.until_done()
    assert reply.outcome is fluxstream.Outcome.DONE
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        assert choice.text == "".join(expected[choice.index])
        assert choice.text  # the model said something
        assert choice.finish_reason == finishes[choice.index] is not None
    # Every usage object is kept, not only the last; `reply.usage` is one of them.
    updates = reply.usage_updates  # type: ignore[attr-defined]
    assert len(updates) == len(usages) == 2
    assert [u.completion_tokens for u in updates] == [u.completion_tokens for u in usages]
    assert reply.usage in updates


# ---------------------------------------------------------------------------- heartbeats


@pytest.fixture(scope="module")
def slow_prompt(llama_server: LlamaServer) -> dict[str, Any]:
    """A prompt the server takes over a second to read, so it pings (``sse_ping_interval=1``)
    before the first token: the reply fluxstream read for it, and its size in words.

    Reading speed depends on the machine and its load, so the size starts small and doubles
    (bounded by the slot's context) until the server did ping.
    """

    async def read(words: int) -> tuple[fluxstream.Reply, fluxstream.StreamStats]:
        async with _client(llama_server) as client:
            async with client.chat.stream(
                model=MODEL, messages=_messages(_long_prompt(words, seed=words)),
                **{**GREEDY, "max_tokens": 2}, **NO_CACHE,
            ) as stream:
                reply = await stream.until_done()
        return reply, stream.stats

    words = 400
    while True:
        reply, stats = anyio.run(read, words)
        if reply.heartbeats or words * 2 > llama_server.slot_ctx - 150:
            return {"words": words, "reply": reply, "stats": stats}
        words *= 2


def test_heartbeats_while_the_prompt_is_read_are_counted(slow_prompt: dict[str, Any]) -> None:
    reply: fluxstream.Reply = slow_prompt["reply"]
    assert reply.outcome is fluxstream.Outcome.DONE, reply.end_reason
    assert reply.heartbeats >= 1
    assert slow_prompt["stats"].heartbeats == reply.heartbeats
    assert reply.skipped_frames == 0
    assert reply.usage is not None and reply.usage.prompt_tokens >= slow_prompt["words"]
    assert reply.text


async def test_reading_the_prompt_is_not_a_stall(
    llama_server: LlamaServer, slow_prompt: dict[str, Any]
) -> None:
    """Heartbeats before the first token are prompt processing, not a stalled generation:
    ``stall_timeout`` counts only between content (from the first content on), so a stall timeout
    sized for the gaps between tokens does not end a stream whose prompt takes long to read.
    The prompt must again take the server over a second to read (it pings then):
    reading speed varies from request to request, so it grows until the server did ping."""
    limit = llama_server.slot_ctx - 150
    words = min(slow_prompt["words"] * 2, limit)
    while True:
        prompt = _long_prompt(words, seed=-words)  # not a prompt read before
        async with _client(
            llama_server, timeouts=fluxstream.Timeouts(stall=0.5, idle=60)
        ) as client:
            async with client.chat.stream(
                model=MODEL, messages=_messages(prompt), **{**GREEDY, "max_tokens": 1},
                **NO_CACHE,
            ) as stream:
                reply = await stream.until_done()
        assert reply.outcome is fluxstream.Outcome.DONE, reply.end_reason
        if reply.heartbeats or words >= limit:
            break
        words = min(words * 2, limit)
    assert reply.heartbeats >= 1  # the prompt did take longer than the stall timeout


# ---------------------------------------------------------------------------- errors


async def test_prompt_over_the_context_is_a_typed_400(llama_server: LlamaServer) -> None:
    prompt = _long_prompt(llama_server.slot_ctx + 200, seed=3)
    async with _client(llama_server) as client:
        with pytest.raises(fluxstream.APIStatusError) as caught:
            async with client.chat.stream(model=MODEL, messages=_messages(prompt), **GREEDY):
                pass
        with pytest.raises(fluxstream.APIStatusError) as completed:
            await client.chat.complete(model=MODEL, messages=_messages(prompt), **GREEDY)
    oai = openai.AsyncOpenAI(base_url=llama_server.base_url, api_key=SECRET, max_retries=0)
    async with oai:
        with pytest.raises(openai.BadRequestError) as reference:
            await oai.chat.completions.create(
                model=MODEL, messages=_messages(prompt), stream=True,  # type: ignore[arg-type]
                **GREEDY,
            )
    for error in (caught.value, completed.value):
        assert error.status_code == 400 == reference.value.status_code
        assert "context" in error.message
        assert error.type == "exceed_context_size_error"
        assert SECRET not in str(error) and SECRET not in repr(error)


# ---------------------------------------------------------------------------- cancel


def _slots_busy(server: LlamaServer) -> int:
    slots = httpx.get(f"{server.root_url}/slots", timeout=5).json()
    return sum(1 for slot in slots if slot["is_processing"])


def _wait_until(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


_RELEASE = re.compile(r"stop processing: n_tokens = (\d+)")
_CANCEL = "stop: cancel task"


@pytest.mark.parametrize(
    ("anyio_backend", "how"),
    [("asyncio", "cancel"), ("trio", "cancel"), ("asyncio", "break-coalesce"),
     ("trio", "break-coalesce")],
)
async def test_cancel_stops_the_generation(llama_server: LlamaServer, how: str) -> None:
    """After a cancel the server itself says so ("stop: cancel task"), frees the slot long
    before the requested 400 tokens, and serves the next request."""
    assert _wait_until(lambda: _slots_busy(llama_server) == 0, 30)
    log_start = len(llama_server.log_text())
    max_tokens = 400
    async with _client(llama_server) as client:
        stream = client.chat.stream(
            model=MODEL, messages=_messages("Tell me a very long story about a lighthouse."),
            max_tokens=max_tokens, ignore_eos=True, **NO_CACHE,
        )
        async with stream:
            if how == "cancel":
                seen = 0
                async with anyio.create_task_group() as tg:
                    async for event in stream:
                        if isinstance(event, fluxstream.TextDelta):
                            seen += 1
                            if seen == 3:  # cancel from another task, as a UI would
                                tg.start_soon(_cancel_soon, stream)
            else:
                pieces = 0
                async for _ in stream.text(coalesce=0.05):
                    pieces += 1
                    if pieces == 3:
                        break
        cancelled_at = time.monotonic()
        assert stream.reply.outcome is fluxstream.Outcome.CANCELLED
        assert stream.reply.text

        def released() -> bool:
            return _CANCEL in llama_server.log_text()[log_start:] and _slots_busy(llama_server) == 0

        assert await anyio.to_thread.run_sync(_wait_until, released, 20.0), \
            llama_server.log_text()[log_start:][-2000:]
        log = llama_server.log_text()[log_start:]
        generated = [int(n) for n in _RELEASE.findall(log)]
        assert generated and max(generated) < max_tokens  # prompt + tokens so far, not 400+
        # The freed slot serves the next request at once (nothing still generating).
        start = time.monotonic()
        reply = await client.chat.complete(model=MODEL, messages=_messages("Hi"), max_tokens=2)
    assert reply.outcome is fluxstream.Outcome.DONE
    assert time.monotonic() - cancelled_at < 60
    assert time.monotonic() - start < 30


async def _cancel_soon(stream: fluxstream.ReplyStream) -> None:
    stream.cancel()


# ---------------------------------------------------------------------------- capture, replay


def _fluxstream_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fluxstream", *args], capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )


def _oracle(body: bytes) -> tuple[str, int]:
    """Text and comment count of a llama.cpp body, read plainly (lines, JSON), as a check."""
    text: list[str] = []
    comments = 0
    for line in body.decode("utf-8").splitlines():
        if line.startswith(":"):
            comments += 1
        elif line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                if choice["index"] == 0:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text), comments


def _byte_reads(body: bytes) -> Iterator[bytes]:
    return (body[i : i + 1] for i in range(len(body)))


async def test_capture_replays_to_the_same_reply(llama_server: LlamaServer, tmp_path: Path) -> None:
    """``fluxstream capture`` records the real bytes; ``replay`` (function and CLI) gives the
    reply a live stream of the same request gets (greedy by the server's defaults)."""
    path = tmp_path / "capture.json"
    done = await anyio.to_thread.run_sync(
        lambda: _fluxstream_cli("capture", "--base-url", llama_server.base_url,
                                "--model", MODEL, "-o", str(path), UNICODE_PROMPT)
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["status"] == 200
    reads = load_fixture(str(path))
    assert reads == [base64.b64decode(r["b64"]) for r in record["reads"]]
    body = b"".join(reads)

    replayed = fluxstream.replay(reads)
    assert replayed.outcome is fluxstream.Outcome.DONE
    oracle_text, oracle_comments = _oracle(body)
    assert replayed.text == oracle_text and replayed.text
    assert replayed.heartbeats == oracle_comments
    # Read boundaries do not matter, even one byte at a time (emoji split mid-sequence).
    one_byte = fluxstream.replay(_byte_reads(body), content_key=replayed.content_key)
    assert one_byte.model_dump() == replayed.model_dump()

    cli = await anyio.to_thread.run_sync(lambda: _fluxstream_cli("replay", str(path), "--json"))
    assert cli.returncode == 0, cli.stderr
    as_json = json.loads(cli.stdout)
    assert {k: v for k, v in as_json.items() if k != "content_key"} == {
        k: v for k, v in replayed.model_dump(mode="json").items() if k != "content_key"
    }

    # Live, the same request (the CLI sends no sampling parameters; the server is greedy).
    async with _client(llama_server) as client:
        async with client.chat.stream(model=MODEL, messages=_messages(UNICODE_PROMPT)) as stream:
            live = await stream.until_done()
    assert live.outcome is replayed.outcome
    assert live.text == replayed.text
    assert [c.finish_reason for c in live.choices] == [c.finish_reason for c in replayed.choices]
    assert live.usage is not None and replayed.usage is not None
    assert (live.usage.prompt_tokens, live.usage.completion_tokens) == (
        replayed.usage.prompt_tokens, replayed.usage.completion_tokens)
