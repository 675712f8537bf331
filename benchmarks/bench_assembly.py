"""Benchmark bytes -> finished reply: fluxstream vs openai-python vs an httpx-sse hand loop.

Run from the repository root::

    .venv/bin/python benchmarks/bench_assembly.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_assembly.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_assembly.py --regimes  # StreamParser per delta only

Method (see benchmarks/README.md, "Assembly"):

* Two synthetic bodies in OpenAI's exact chunk shape: a chat stream of 20,000 content deltas
  and a tool stream of 20,000 argument deltas (two calls), each ending with a finish chunk, a
  usage chunk and ``[DONE]``. Every contender gets the *same* list of 4096-byte reads.
* End to end (async, ``httpx.AsyncClient`` over ``httpx.MockTransport`` whose body is an async
  iterator of those reads, so httpx's own cost is identical for everyone):

  - ``fluxstream``: ``response.aiter_bytes()`` -> ``StreamParser.feed`` -> ``close()`` ->
    ``parser.reply``.
  - ``openai-stream``: openai-python's ``client.chat.completions.stream(...)`` helper
    (``AsyncChatCompletionStream``): iterate its events, then ``get_final_completion()``.
  - ``openai-create``: ``client.chat.completions.create(stream=True)`` iterated, with the
    caller accumulating content / arguments from the typed chunks (a common hand loop).
  - ``httpx-sse-loop``: ``httpx_sse.aconnect_sse`` + ``json.loads`` + dict access, appending
    content and argument fragments to lists (no types, no validation, no quirk handling).

* Sans-IO: ``fluxstream._parser.replay(reads)`` with no HTTP at all.
* JSON path: the per-chunk decode alone over the 20,000 ``data`` payloads, four ways:
  ``json.loads`` + dict access, ``pydantic_core.from_json`` + dict access, ``msgspec.json``
  (what ``ChatCompletionsFormat.feed_many`` decodes with) + dict access, and
  ``TypeAdapter(ChatCompletionChunk).validate_json`` into the wire models + attribute access.
* Partial JSON: asking for the best-effort arguments after each of 5,000 fragments of a
  544 KiB argument: ``pydantic_core.from_json(prefix, allow_partial=...)`` on every prefix vs
  the incremental ``PartialJSON`` (through ``parser.partial_arguments`` and through a reply
  snapshot).

Every figure is the median of ``--repeats`` runs, in the same process. Time is the process's
CPU time (``time.process_time``): every contender is CPU-bound in this one process (the
"network" is an in-memory ``MockTransport``), and CPU time is not inflated when other jobs share
the machine. ``--wall`` measures ``time.perf_counter`` instead.

``--regimes``: only ``StreamParser``'s cost per content delta on the bytes of
``bench_client.py``'s server, read as its regimes deliver them (whole, 16 KiB, 4 KiB, one
event per read), and a fresh parser's set-up plus its first read of three events.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

import httpx
import httpx_sse
import msgspec
import openai
import pydantic
import pydantic_core

from fluxstream._parser import StreamParser, replay
from fluxstream._partial_json import PartialJSON
from fluxstream._wire import ChatCompletionChunk

READ = 4096
WORDS = ["The", " river", " bends", " under", " the", " old", " stone", " bridge", ",", " and",
         " café", " lights", " shimmer", " on", " the", " water", ".", "\n", " Ünïcode", " ✓"]

# --------------------------------------------------------------------------- inputs


def _chunk(**fields: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-B6lzjT6Mg5uR5zqOxnVyH0y9vGNeo", "object": "chat.completion.chunk",
            "created": 1740897707, "model": "gpt-4o-2024-08-06", "service_tier": "default",
            "system_fingerprint": "fp_eb9dce56a8", **fields}


def _choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]


def _frame(payloads: list[dict[str, Any]]) -> bytes:
    lines = [b"data: " + json.dumps(p, separators=(",", ":"), ensure_ascii=False).encode()
             + b"\n\n" for p in payloads]
    return b"".join(lines) + b"data: [DONE]\n\n"


USAGE = {"prompt_tokens": 30, "completion_tokens": 20000, "total_tokens": 20030,
         "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
         "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                       "accepted_prediction_tokens": 0,
                                       "rejected_prediction_tokens": 0}}


def chat_body(n: int) -> bytes:
    payloads = [_chunk(choices=_choice({"role": "assistant", "content": "", "refusal": None}))]
    payloads += [_chunk(choices=_choice({"content": WORDS[i % len(WORDS)]}), usage=None)
                 for i in range(n)]
    payloads.append(_chunk(choices=_choice({}, "stop"), usage=None))
    payloads.append(_chunk(choices=[], usage=USAGE))
    return _frame(payloads)


def tool_body(n: int) -> bytes:
    payloads = [_chunk(choices=_choice({"role": "assistant", "content": None}))]
    half = n // 2
    for call in (0, 1):
        payloads.append(_chunk(choices=_choice({"tool_calls": [{
            "index": call, "id": f"call_{call}", "type": "function",
            "function": {"name": "write_file", "arguments": ""}}]})))
        pieces = ['{"path": "a.txt", "text": "'] + [WORDS[i % len(WORDS)].replace("\n", "\\n")
                                                    for i in range(half - 2)] + ['"}']
        payloads += [_chunk(choices=_choice({"tool_calls": [
            {"index": call, "function": {"arguments": p}}]})) for p in pieces]
    payloads.append(_chunk(choices=_choice({}, "tool_calls")))
    payloads.append(_chunk(choices=[], usage=USAGE))
    return _frame(payloads)


def reads_of(body: bytes) -> list[bytes]:
    return [body[i : i + READ] for i in range(0, len(body), READ)]


def summary(text: str, calls: dict[int, str]) -> tuple[int, str, list[tuple[int, str]]]:
    """What each contender must produce, to check they all did the same work."""
    return len(text), text[-20:], sorted((i, a[-20:]) for i, a in calls.items())


# --------------------------------------------------------------------------- contenders


def _http(reads: list[bytes]) -> httpx.AsyncClient:
    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=body())

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


URL = "http://127.0.0.1:9/v1"
REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


async def run_fluxstream(reads: list[bytes]) -> Any:
    parser = StreamParser()
    async with _http(reads) as http, http.stream(
        "POST", URL + "/chat/completions", json=REQUEST
    ) as response:
        async for data in response.aiter_bytes():
            parser.feed(data)
        parser.close()
    reply = parser.reply
    choice = reply.choices[0]
    return summary(choice.text, {t.index: t.arguments for t in choice.tool_calls})


def run_replay(reads: list[bytes]) -> Any:
    reply = replay(reads)
    choice = reply.choices[0]
    return summary(choice.text, {t.index: t.arguments for t in choice.tool_calls})


def _openai(reads: list[bytes]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sk-bench", base_url=URL, http_client=_http(reads),
                              max_retries=0)


async def run_openai_stream(reads: list[bytes]) -> Any:
    client = _openai(reads)
    async with client.chat.completions.stream(**REQUEST) as stream:  # type: ignore[arg-type]
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    await client.close()
    message = final.choices[0].message
    calls = {i: c.function.arguments for i, c in enumerate(message.tool_calls or [])}
    return summary(message.content or "", calls)


async def run_openai_create(reads: list[bytes]) -> Any:
    client = _openai(reads)
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    stream = await client.chat.completions.create(stream=True, **REQUEST)  # type: ignore[call-overload]
    async for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
            for call in delta.tool_calls or ():
                if call.function and call.function.arguments:
                    calls.setdefault(call.index, []).append(call.function.arguments)
    await client.close()
    return summary("".join(text), {i: "".join(p) for i, p in calls.items()})


async def run_httpx_sse(reads: list[bytes]) -> Any:
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    async with _http(reads) as http, httpx_sse.aconnect_sse(
        http, "POST", URL + "/chat/completions", json=REQUEST
    ) as source:
        async for sse in source.aiter_sse():
            if sse.data == "[DONE]":
                break
            obj = json.loads(sse.data)
            for choice in obj["choices"]:
                delta = choice["delta"]
                content = delta.get("content")
                if content:
                    text.append(content)
                for call in delta.get("tool_calls") or ():
                    args = call.get("function", {}).get("arguments")
                    if args:
                        calls.setdefault(call["index"], []).append(args)
    return summary("".join(text), {i: "".join(p) for i, p in calls.items()})


# --------------------------------------------------------------------------- JSON paths


def payloads_of(body: bytes) -> list[str]:
    return [line[6:] for line in body.decode().split("\n") if line.startswith("data: {")]


def decode_dicts(loads: Callable[[str], Any], payloads: list[str]) -> int:
    n = 0
    for data in payloads:
        obj = loads(data)
        for choice in obj.get("choices") or ():
            delta = choice.get("delta")
            if delta and delta.get("content"):
                n += 1
    return n


ADAPTER = pydantic.TypeAdapter(ChatCompletionChunk)


def decode_models(payloads: list[str]) -> int:
    n = 0
    validate = ADAPTER.validate_json
    for data in payloads:
        chunk = validate(data)
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                n += 1
    return n


# --------------------------------------------------------------------------- partial JSON


def partial_inputs() -> list[str]:
    line = 'def f(x):\n    return "quoted \\\\ text" + x  # café\n'
    body = (line * (544 * 1024 // len(line) + 1))[: 544 * 1024 - 40]
    text = json.dumps({"path": "src/big.py", "content": body}, ensure_ascii=False)
    size = len(text) // 5000 + 1
    return [text[i : i + size] for i in range(0, len(text), size)]


def partial_from_json(fragments: list[str], limit: int) -> None:
    prefix = ""
    for fragment in fragments[:limit]:
        prefix += fragment
        pydantic_core.from_json(prefix, allow_partial="trailing-strings")


def partial_incremental(fragments: list[str]) -> None:
    parser = PartialJSON()
    for fragment in fragments:
        parser.feed(fragment)
        parser.value()


def partial_parser(fragments: list[str], via_reply: bool) -> None:
    parser = StreamParser()
    for fragment in fragments:
        parser.feed_chunk({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": fragment}}]}}]})
        if via_reply:
            parser.reply.choices[0].tool_calls[0].partial_arguments()
        else:
            parser.partial_arguments(0, 0)


# --------------------------------------------------------------------------- driver


CLOCK = time.process_time


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        gc.collect()
        start = CLOCK()
        result = fn()
        times.append(CLOCK() - start)
    return statistics.median(times), result


def table(title: str, rows: list[tuple[str, float]], chunks: int, base: str) -> None:
    base_time = dict(rows)[base]
    print(f"\n{title}")
    print(f"  {'contender':<28}{'median s':>10}{'chunks/s':>12}   time / {base}")
    for name, seconds in rows:
        print(f"  {name:<28}{seconds:>10.4f}{chunks / seconds:>12,.0f}"
              f"   {seconds / base_time:.2f}x")


def client_stream(deltas: int) -> bytes:
    """The bytes ``benchmarks/bench_client.py``'s server sends for one stream of ``deltas``
    content deltas (``id: N`` + one ``data:`` line per event, ``retry:`` on the first)."""
    from bench_client import _body  # the client benchmark's request, same directory
    from bench_server import events_for

    return b"".join(events_for(_body(deltas)))


def regimes(repeats: int) -> None:
    """``--regimes``: µs per content delta of a fresh ``StreamParser`` (set-up, ``feed`` of
    every read, ``close``) on the client benchmark's stream, read as its regimes deliver it,
    and the set-up plus the first read (three events, as the time-to-first-token burst
    sends them). Wall time of many streams (``perf_counter``: each stream is a few hundred
    microseconds), garbage collector off while timing, median of ``repeats``."""
    from fluxstream._parser import StreamParser

    print("\nStreamParser per content delta, the client benchmark's stream "
          f"(median of {repeats}, wall time, gc off)")
    for deltas in (100, 40):
        body = client_stream(deltas)
        events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
        shapes = {
            "whole stream in one read (packed)": [body],
            "16 KiB reads (chunk16k)": [body[i : i + 16384] for i in range(0, len(body), 16384)],
            "4 KiB reads": [body[i : i + 4096] for i in range(0, len(body), 4096)],
            "one event per read (paced)": events,
        }
        streams = 20_000 // deltas

        def run(reads: list[bytes], streams: int = streams) -> None:
            for _ in range(streams):
                parser = StreamParser()
                for read in reads:
                    parser.feed(read)
                parser.close()

        print(f"  {deltas} deltas per stream ({len(body):,} bytes, {len(events)} events):")
        for name, reads in shapes.items():
            times = []
            for _ in range(repeats):
                gc.collect()
                gc.disable()
                start = time.perf_counter()
                run(reads)
                times.append(time.perf_counter() - start)
                gc.enable()
            per = statistics.median(times) / (streams * deltas) * 1e6
            print(f"    {name:<36}{per:8.2f} us per delta")
    first = b"".join(events[:3])
    times = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        for _ in range(2_000):
            StreamParser().feed(first)
        times.append(time.perf_counter() - start)
        gc.enable()
    print(f"  new parser + first read of 3 events:   {statistics.median(times) / 2_000 * 1e6:.2f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 deltas, 3 repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    ap.add_argument("--regimes", action="store_true",
                    help="only StreamParser's cost per delta in the client benchmark's regimes")
    args = ap.parse_args()
    if args.regimes:
        regimes(max(args.repeats, 3))
        return
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    n = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else args.repeats
    print(f"Python {platform.python_version()} on {platform.machine()}; pydantic "
          f"{pydantic.VERSION}, openai {openai.__version__}, httpx {httpx.__version__}; "
          f"{n:,} deltas, {READ}-byte reads, median of {repeats}, "
          f"{'wall' if args.wall else 'CPU'} time")

    for label, body in (("chat", chat_body(n)), ("tool", tool_body(n))):
        reads = reads_of(body)
        chunks = len(payloads_of(body))
        contenders: list[tuple[str, Callable[[], Any]]] = [
            ("fluxstream (httpx)", lambda r=reads: asyncio.run(run_fluxstream(r))),
            ("fluxstream replay (no IO)", lambda r=reads: run_replay(r)),
            ("httpx-sse + json.loads", lambda r=reads: asyncio.run(run_httpx_sse(r))),
            ("openai create() loop", lambda r=reads: asyncio.run(run_openai_create(r))),
            ("openai stream() helper", lambda r=reads: asyncio.run(run_openai_stream(r))),
        ]
        rows, results = [], {}
        for name, fn in contenders:
            seconds, result = median_time(fn, repeats)
            rows.append((name, seconds))
            results[name] = result
        expected = results["fluxstream (httpx)"]
        for name, result in results.items():
            assert result == expected, f"{name} assembled something else: {result} != {expected}"
        table(f"{label} stream: {len(body):,} bytes, {chunks:,} chunks, bytes -> reply",
              rows, chunks, "fluxstream (httpx)")

    payloads = payloads_of(chat_body(n))
    rows = []
    for name, fn in (
        ("pydantic_core.from_json", lambda: decode_dicts(pydantic_core.from_json, payloads)),
        ("msgspec.json (feed_many's)", lambda: decode_dicts(msgspec.json.decode, payloads)),
        ("json.loads", lambda: decode_dicts(json.loads, payloads)),
        ("TypeAdapter.validate_json", lambda: decode_models(payloads)),
    ):
        rows.append((name, median_time(fn, repeats)[0]))
    table(f"JSON path: decode + read content of {len(payloads):,} chunks", rows,
          len(payloads), "pydantic_core.from_json")

    fragments = partial_inputs()
    limit = 500 if args.quick else 1500
    print(f"\npartial arguments after every fragment: {len(fragments):,} fragments, "
          f"{len(''.join(fragments).encode()):,} bytes")
    quadratic, _ = median_time(lambda: partial_from_json(fragments, limit), 1)
    projected = quadratic * (len(fragments) / limit) ** 2
    print(f"  from_json on every prefix: {quadratic:.3f}s for the first {limit} fragments "
          f"(quadratic: ~{projected:.1f}s projected for all)")
    for name, fn in (
        ("PartialJSON feed + value", lambda: partial_incremental(fragments)),
        ("parser.partial_arguments()", lambda: partial_parser(fragments, False)),
        ("reply...partial_arguments()", lambda: partial_parser(fragments, True)),
    ):
        print(f"  {name:<30}{median_time(fn, repeats)[0]:.3f}s for all")


if __name__ == "__main__":
    main()
