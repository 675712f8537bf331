"""Benchmark bytes -> finished reply for the Gemini format (``streamGenerateContent?alt=sse``).

Run from the repository root::

    .venv/bin/python benchmarks/bench_gemini.py            # full run (a minute or two)
    .venv/bin/python benchmarks/bench_gemini.py --quick    # smoke run

Method (the same as ``bench_formats.py`` for the other formats):

* Synthetic bodies in Gemini's exact event shape and wire framing (``data: <json>\\r\\n\\r\\n``,
  Google's JSON spacing, no ``[DONE]``): a text stream of ``N`` events (a few words each, as
  Gemini sends them, with the growing ``usageMetadata``, ``modelVersion`` and ``responseId``
  every event carries), the last with ``finishReason``; and a tool stream whose arguments
  come as ``N`` Vertex ``partialArgs`` string pieces. Every contender gets the *same* list of
  4096-byte reads.
* End to end, async, over an in-memory ``MockTransport`` whose body is an async iterator of
  those reads (the HTTP client's own cost is the same for everyone):

  - ``fluxstream``: ``response.aiter_bytes()`` -> ``StreamParser(format="gemini").feed`` ->
    ``close()`` -> ``parser.reply``;
  - ``httpx-sse + json.loads``: ``httpx_sse.aconnect_sse`` + ``json.loads`` + a walk over
    ``candidates[].content.parts[]`` appending text and argument pieces to lists (no types,
    no validation, no outcome, no quirk handling);
  - google-genai's own streaming iteration on the same bytes:
    ``client.aio.models.generate_content_stream(...)`` (its ``httpx_async_client`` is the mock),
    each chunk's text and argument pieces accumulated.

* ``fluxstream replay`` is the sans-IO parser with no HTTP at all.

Every figure is the median of ``--repeats`` runs in one process, in CPU time
(``time.process_time``; ``--wall`` for wall-clock). All contenders must assemble the same text
and arguments (checked).
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
import pydantic
from google import genai
from google.genai import types

from fluxstream._parser import StreamParser, replay

READ = 4096
WORDS = ["The", " river", " bends", " under", " the", " old", " stone", " bridge", ",", " and",
         " café", " lights", " shimmer", " on", " the", " water", ".", "\n", " Ünïcode", " ✓"]
PER_EVENT = 4  # words per event: Gemini sends a few tokens per event
MODEL = "gemini-2.5-flash"
RESPONSE_ID = "0J-HaJetAqv0jrEPwu-tsQ0"


def _dumps(obj: Any) -> str:
    # Google's own spacing: ": " after a key, "," without a space.
    return json.dumps(obj, separators=(",", ": "), ensure_ascii=False)


def _frame(payloads: list[dict[str, Any]]) -> bytes:
    return "".join(f"data: {_dumps(p)}\r\n\r\n" for p in payloads).encode()


def _usage(n: int, final: bool) -> dict[str, Any]:
    usage: dict[str, Any] = {"promptTokenCount": 12, "totalTokenCount": 12 + n,
                             "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}]}
    if final:
        usage["candidatesTokenCount"] = n
    return usage


def text_body(n: int) -> bytes:
    payloads = []
    for i in range(n):
        text = "".join(WORDS[(i * PER_EVENT + k) % len(WORDS)] for k in range(PER_EVENT))
        cand: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"},
                                "index": 0}
        if i == n - 1:
            cand["finishReason"] = "STOP"
        payloads.append({"candidates": [cand], "usageMetadata": _usage(i, i == n - 1),
                         "modelVersion": MODEL, "responseId": RESPONSE_ID})
    return _frame(payloads)


def tool_body(n: int) -> bytes:
    def event(part: dict[str, Any], finish: bool = False) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"parts": [part], "role": "model"}}
        if finish:
            cand["finishReason"] = "STOP"
        return {"candidates": [cand], "usageMetadata": {"trafficType": "ON_DEMAND"},
                "modelVersion": MODEL, "responseId": RESPONSE_ID}

    payloads = [event({"functionCall": {"name": "write_file", "willContinue": True}}),
                event({"functionCall": {"partialArgs": [
                    {"jsonPath": "$.path", "stringValue": "a.txt"}], "willContinue": True}})]
    payloads += [event({"functionCall": {"partialArgs": [
        {"jsonPath": "$.text", "stringValue": WORDS[i % len(WORDS)], "willContinue": True}],
        "willContinue": True}}) for i in range(n)]
    payloads += [event({"functionCall": {"partialArgs": [
        {"jsonPath": "$.text", "stringValue": ""}], "willContinue": True}}),
        event({"functionCall": {}}), event({"text": ""}, finish=True)]
    return _frame(payloads)


def reads_of(body: bytes) -> list[bytes]:
    return [body[i : i + READ] for i in range(0, len(body), READ)]


def summary(text: str, args: dict[str, Any] | None) -> tuple[int, str, str]:
    """What each contender must produce (arguments compared as JSON values)."""
    dumped = json.dumps(args, sort_keys=True, ensure_ascii=False) if args else ""
    return len(text), text[-20:], dumped[-40:]


# --------------------------------------------------------------------------- contenders

URL = "http://127.0.0.1:9"


def _httpx(reads: list[bytes]) -> httpx.AsyncClient:
    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=body())

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def run_fluxstream(reads: list[bytes]) -> Any:
    parser = StreamParser(format="gemini")
    path = f"{URL}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    async with _httpx(reads) as http, http.stream("POST", path, json={}) as response:
        async for data in response.aiter_bytes():
            parser.feed(data)
        parser.close()
    return _reply_summary(parser.reply)


def _reply_summary(reply: Any) -> Any:
    assert reply.outcome.value == "done", reply.outcome
    choice = reply.choices[0]
    args = choice.tool_calls[0].parse_arguments() if choice.tool_calls else None
    return summary(choice.text, args)


def run_replay(reads: list[bytes]) -> Any:
    return _reply_summary(replay(reads, format="gemini"))


def _set_piece(args: dict[str, Any], piece: dict[str, Any], extend: bool) -> None:
    key = piece["jsonPath"][2:]
    value = piece.get("stringValue")
    args[key] = args.get(key, "") + value if extend else value


async def run_httpx_sse(reads: list[bytes]) -> Any:
    text: list[str] = []
    args: dict[str, Any] = {}
    calls = 0
    path = f"{URL}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    async with _httpx(reads) as http, httpx_sse.aconnect_sse(http, "POST", path,
                                                             json={}) as source:
        continuing = None
        async for sse in source.aiter_sse():
            obj = json.loads(sse.data)
            for cand in obj.get("candidates", ()):
                for part in cand.get("content", {}).get("parts", ()):
                    if "text" in part and not part.get("thought"):
                        text.append(part["text"])
                    call = part.get("functionCall")
                    if call is not None:
                        calls += "name" in call
                        for piece in call.get("partialArgs", ()):
                            _set_piece(args, piece, continuing == piece["jsonPath"])
                            continuing = piece["jsonPath"] if piece.get("willContinue") else None
    return summary("".join(text), args if calls else None)


async def run_google_genai(reads: list[bytes]) -> Any:
    options = types.HttpOptions(base_url=URL, httpx_async_client=_httpx(reads),
                                retry_options=types.HttpRetryOptions(attempts=1))
    client = genai.Client(api_key="bench", http_options=options)
    text: list[str] = []
    args: dict[str, Any] = {}
    calls = 0
    continuing = None
    async for chunk in await client.aio.models.generate_content_stream(model=MODEL,
                                                                        contents="hi"):
        for cand in chunk.candidates or ():
            for part in (cand.content.parts if cand.content else None) or ():
                if part.text and not part.thought:
                    text.append(part.text)
                call = part.function_call
                if call is not None:
                    calls += call.name is not None
                    for piece in call.partial_args or ():
                        path = piece.json_path
                        _set_piece(args, {"jsonPath": path, "stringValue": piece.string_value},
                                   continuing == path)
                        continuing = path if piece.will_continue else None
    return summary("".join(text), args if calls else None)


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


def table(title: str, rows: list[tuple[str, float]], events: int, base: str) -> None:
    base_time = dict(rows)[base]
    print(f"\n{title}")
    print(f"  {'contender':<34}{'median s':>10}{'events/s':>12}   time / {base}")
    for name, seconds in rows:
        print(f"  {name:<34}{seconds:>10.4f}{events / seconds:>12,.0f}"
              f"   {seconds / base_time:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 events, 3 repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    args = ap.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    n = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else args.repeats
    print(f"Python {platform.python_version()} on {platform.machine()}; pydantic "
          f"{pydantic.VERSION}, google-genai {genai.__version__}, httpx {httpx.__version__}; "
          f"{n:,} events, {READ}-byte reads, median of {repeats}, "
          f"{'wall' if args.wall else 'CPU'} time")
    ratios: dict[str, tuple[float, float]] = {}
    for label, body in (("text", text_body(n)), ("tool (partialArgs)", tool_body(n))):
        reads = reads_of(body)
        events = body.count(b"\r\n\r\n")
        contenders: list[tuple[str, Callable[[], Any]]] = [
            ("fluxstream (httpx)", lambda r=reads: asyncio.run(run_fluxstream(r))),
            ("fluxstream replay (no IO)", lambda r=reads: run_replay(r)),
            ("httpx-sse + json.loads", lambda r=reads: asyncio.run(run_httpx_sse(r))),
            ("google-genai stream", lambda r=reads: asyncio.run(run_google_genai(r))),
        ]
        rows, results = [], {}
        for name, fn in contenders:
            seconds, result = median_time(fn, repeats)
            rows.append((name, seconds))
            results[name] = result
        assert len(set(results.values())) == 1, results  # everyone assembled the same
        table(f"gemini {label}: {len(body):,} bytes, {events:,} events", rows, events,
              "fluxstream (httpx)")
        times = dict(rows)
        ratios[label] = (times["google-genai stream"] / times["fluxstream (httpx)"],
                         times["httpx-sse + json.loads"] / times["fluxstream (httpx)"])
    print("\nfluxstream (httpx) speed-up:")
    for label, (sdk, hand) in ratios.items():
        print(f"  {label:<20} {sdk:6.1f}x google-genai   {hand:5.2f}x httpx-sse + json.loads")


if __name__ == "__main__":
    main()
