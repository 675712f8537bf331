"""Benchmark bytes -> finished reply for the Responses and Anthropic Messages formats.

(And, side by side, the parser's CPU per delta for every API on the same text: ``--per-delta``.)

Run from the repository root::

    .venv/bin/python benchmarks/bench_formats.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_formats.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_formats.py --per-delta  # every API per delta, ~1 minute
    .venv/bin/python benchmarks/bench_formats.py --per-delta --instructions  # the same, in
        # instructions (valgrind's cachegrind; independent of the machine's load, ~10 minutes)

Method (the same as ``bench_assembly.py`` for Chat Completions):

* Synthetic bodies in each API's exact event shapes and wire framing (``event: <type>`` +
  ``data: <json>``, no ``[DONE]``): a text stream of ``N`` text deltas and a tool stream of
  ``N`` argument fragments, each closed by the format's terminal events with usage. Every
  contender gets the *same* list of 4096-byte reads.
* End to end, async, over an in-memory ``MockTransport`` whose body is an async iterator of
  those reads (so the HTTP client's own cost is the same for everyone):

  - ``fluxstream``: ``response.aiter_bytes()`` -> ``StreamParser(format=...).feed`` ->
    ``close()`` -> ``parser.reply``;
  - ``httpx-sse + json.loads``: ``httpx_sse.aconnect_sse`` + ``json.loads`` + a dispatch on
    ``type`` appending text and argument fragments to lists (no types, no validation, no
    quirk handling);
  - the official SDK's own stream helper on the same bytes: openai-python's
    ``client.responses.stream(...)`` (iterate, then ``get_final_response()``), and
    anthropic-sdk-python's ``client.messages.stream(...)`` (``MessageStream``: iterate, then
    ``get_final_message()``; it runs on ``httpx2``, so its transport is ``httpx2``'s
    ``MockTransport``).

* ``fluxstream replay`` is the sans-IO parser with no HTTP at all.
* Partial tool arguments: a 544 KiB argument in 5,000 fragments, streamed in each format; after
  every fragment the best-effort arguments are asked for (``parser.partial_arguments``), total
  time. anthropic-sdk-python's ``MessageStream`` re-parses the whole accumulated argument
  string on every ``input_json_delta`` (quadratic); it is timed on the first fragments and the
  total projected, as ``bench_assembly.py`` does for ``from_json`` on every prefix.

Every figure is the median of ``--repeats`` runs in one process, in CPU time
(``time.process_time``; ``--wall`` for wall-clock), which other jobs on the machine inflate
less than wall time. All contenders must assemble the same text and arguments (checked).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

import anthropic
import httpx
import httpx2
import httpx_sse
import openai
import pydantic

from fluxstream._parser import StreamParser, replay

READ = 4096
WORDS = ["The", " river", " bends", " under", " the", " old", " stone", " bridge", ",", " and",
         " café", " lights", " shimmer", " on", " the", " water", ".", "\n", " Ünïcode", " ✓"]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _frame(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {_dumps(e)}\n\n" for e in events).encode()


def _argument_pieces(n: int) -> list[str]:
    return ['{"path": "a.txt", "text": "'] + [
        WORDS[i % len(WORDS)].replace("\n", "\\n") for i in range(n - 2)] + ['"}']


# --------------------------------------------------------------------------- Responses bodies

RESP_ID = "resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
MSG_ID = "msg_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
FC_ID = "fc_0a1b2c3d4e5f60718293a4b5c6d7e8f9"


def _response(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
    return {"id": RESP_ID, "object": "response", "created_at": 1741269019, "status": status,
            "error": None, "incomplete_details": None, "instructions": None,
            "max_output_tokens": None, "model": "gpt-4.1-2025-04-14", "output": output,
            "parallel_tool_calls": True, "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None}, "store": True, "temperature": 1.0,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
            "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None,
            "metadata": {}}


RESP_USAGE = {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 0},
              "output_tokens": 20000, "output_tokens_details": {"reasoning_tokens": 0},
              "total_tokens": 20030}


def responses_text_body(n: int) -> bytes:
    seq = iter(range(10**9))
    pieces = [WORDS[i % len(WORDS)] for i in range(n)]
    text = "".join(pieces)
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    done_item = {"id": MSG_ID, "type": "message", "status": "completed", "role": "assistant",
                 "content": [{**part, "text": text}]}
    events = [
        {"type": "response.created", "sequence_number": next(seq),
         "response": _response("in_progress", [], None)},
        {"type": "response.in_progress", "sequence_number": next(seq),
         "response": _response("in_progress", [], None)},
        {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": 0,
         "item": {"id": MSG_ID, "type": "message", "status": "in_progress",
                  "role": "assistant", "content": []}},
        {"type": "response.content_part.added", "sequence_number": next(seq),
         "item_id": MSG_ID, "output_index": 0, "content_index": 0, "part": part},
    ]
    events += [{"type": "response.output_text.delta", "sequence_number": next(seq),
                "item_id": MSG_ID, "output_index": 0, "content_index": 0, "delta": p,
                "logprobs": [], "obfuscation": "a1b2c3"} for p in pieces]
    events += [
        {"type": "response.output_text.done", "sequence_number": next(seq), "item_id": MSG_ID,
         "output_index": 0, "content_index": 0, "text": text, "logprobs": []},
        {"type": "response.content_part.done", "sequence_number": next(seq),
         "item_id": MSG_ID, "output_index": 0, "content_index": 0,
         "part": {**part, "text": text}},
        {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": 0,
         "item": done_item},
        {"type": "response.completed", "sequence_number": next(seq),
         "response": _response("completed", [done_item], RESP_USAGE)},
    ]
    return _frame(events)


def responses_tool_body(pieces: list[str]) -> bytes:
    seq = iter(range(10**9))
    args = "".join(pieces)
    item = {"id": FC_ID, "type": "function_call", "status": "in_progress", "arguments": "",
            "call_id": "call_write", "name": "write_file"}
    done_item = {**item, "status": "completed", "arguments": args}
    events = [
        {"type": "response.created", "sequence_number": next(seq),
         "response": _response("in_progress", [], None)},
        {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": 0,
         "item": item},
    ]
    events += [{"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                "item_id": FC_ID, "output_index": 0, "delta": p} for p in pieces]
    events += [
        {"type": "response.function_call_arguments.done", "sequence_number": next(seq),
         "item_id": FC_ID, "output_index": 0, "arguments": args},
        {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": 0,
         "item": done_item},
        {"type": "response.completed", "sequence_number": next(seq),
         "response": _response("completed", [done_item], RESP_USAGE)},
    ]
    return _frame(events)


# --------------------------------------------------------------------------- Anthropic bodies


def _message_start() -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0,
                                         "cache_read_input_tokens": 0, "output_tokens": 1,
                                         "service_tier": "standard"}}}


def _message_end(reason: str, n: int) -> list[dict[str, Any]]:
    return [{"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
             "usage": {"output_tokens": n}}, {"type": "message_stop"}]


def anthropic_text_body(n: int) -> bytes:
    events = [_message_start(),
              {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}, {"type": "ping"}]
    events += [{"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": WORDS[i % len(WORDS)]}}
               for i in range(n)]
    events += [{"type": "content_block_stop", "index": 0}, *_message_end("end_turn", n)]
    return _frame(events)


def anthropic_tool_body(pieces: list[str]) -> bytes:
    events = [_message_start(),
              {"type": "content_block_start", "index": 0,
               "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                                 "name": "write_file", "input": {}}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "input_json_delta", "partial_json": ""}}]
    events += [{"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": p}} for p in pieces]
    events += [{"type": "content_block_stop", "index": 0}, *_message_end("tool_use",
                                                                        len(pieces))]
    return _frame(events)


def reads_of(body: bytes) -> list[bytes]:
    return [body[i : i + READ] for i in range(0, len(body), READ)]


def summary(text: str, args: str) -> tuple[int, str, int, str]:
    """What each contender must produce, to check they all did the same work (arguments
    compared as JSON values: anthropic's helper gives back the parsed ``input``)."""
    args = _dumps(json.loads(args)) if args else ""
    return len(text), text[-20:], len(args), args[-20:]


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


def _httpx2(reads: list[bytes]) -> Any:
    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    def handler(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=body())

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


def _reply_summary(reply: Any) -> Any:
    choice = reply.choices[0]
    return summary(choice.text, choice.tool_calls[0].arguments if choice.tool_calls else "")


async def run_fluxstream(reads: list[bytes], fmt: str) -> Any:
    parser = StreamParser(format=fmt)
    async with _httpx(reads) as http, http.stream("POST", URL + "/v1/x", json={}) as response:
        async for data in response.aiter_bytes():
            parser.feed(data)
            if parser.finished:
                break
        parser.close()
    return _reply_summary(parser.reply)


def run_replay(reads: list[bytes], fmt: str) -> Any:
    return _reply_summary(replay(reads, format=fmt))


async def run_httpx_sse(reads: list[bytes], fmt: str) -> Any:
    text: list[str] = []
    args: list[str] = []
    async with _httpx(reads) as http, httpx_sse.aconnect_sse(
        http, "POST", URL + "/v1/x", json={}
    ) as source:
        async for sse in source.aiter_sse():
            obj = json.loads(sse.data)
            kind = obj["type"]
            if fmt == "responses":
                if kind == "response.output_text.delta":
                    text.append(obj["delta"])
                elif kind == "response.function_call_arguments.delta":
                    args.append(obj["delta"])
                elif kind == "response.completed":
                    break
            else:
                if kind == "content_block_delta":
                    delta = obj["delta"]
                    if delta["type"] == "text_delta":
                        text.append(delta["text"])
                    elif delta["type"] == "input_json_delta":
                        args.append(delta["partial_json"])
                elif kind == "message_stop":
                    break
    return summary("".join(text), "".join(args))


async def run_openai_stream(reads: list[bytes]) -> Any:
    client = openai.AsyncOpenAI(api_key="sk-bench", base_url=URL + "/v1",
                                http_client=_httpx(reads), max_retries=0)
    async with client.responses.stream(model="gpt-4.1", input="hi") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    await client.close()
    text = "".join(c.text for o in final.output if o.type == "message" for c in o.content
                   if c.type == "output_text")
    args = "".join(o.arguments for o in final.output if o.type == "function_call")
    return summary(text, args)


async def run_anthropic_stream(reads: list[bytes], limit: int | None = None) -> Any:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-bench", base_url=URL,
                                      http_client=_httpx2(reads), max_retries=0)
    async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64000,
                                      messages=[{"role": "user", "content": "hi"}]) as stream:
        seen = 0
        async for event in stream:
            seen += event.type == "input_json"
            if limit is not None and seen >= limit:
                await client.close()
                return None
        final = await stream.get_final_message()
    await client.close()
    text = "".join(b.text for b in final.content if b.type == "text")
    args = "".join(_dumps(b.input) for b in final.content if b.type == "tool_use")
    return summary(text, args)


# --------------------------------------------------------------------------- partial arguments


def partial_pieces() -> list[str]:
    line = 'def f(x):\n    return "quoted \\\\ text" + x  # café\n'
    body = (line * (544 * 1024 // len(line) + 1))[: 544 * 1024 - 40]
    text = json.dumps({"path": "src/big.py", "content": body}, ensure_ascii=False)
    size = len(text) // 5000 + 1
    return [text[i : i + size] for i in range(0, len(text), size)]


def partial_run(events: list[bytes], fmt: str, call: int) -> Any:
    """Feed one event at a time; after each, the best-effort arguments so far."""
    parser = StreamParser(format=fmt)
    value = None
    for data in events:
        parser.feed(data)
        with contextlib.suppress(KeyError):
            value = parser.partial_arguments(0, call)
    parser.close()
    return value


def events_of(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e]


# --------------------------------------------------------------------------- per delta, every API
#
# The same text in the same number of deltas, in each API's own event shape and framing, through
# StreamParser alone (bytes -> finished reply, no HTTP): "packed" reads of 4096 bytes (many
# events per read, as a busy connection delivers them) and "small" reads of one event each (as a
# paced server flushes them). Rounds interleave the APIs; the medians of the rounds are compared
# with Chat Completions' (the target: every API within 10% of it per delta).

_CHAT_HEAD = {"id": "chatcmpl-B6lzjT6Mg5uR5zqOxnVyH0y9vGNeo", "object": "chat.completion.chunk",
              "created": 1740897707, "model": "gpt-4o-2024-08-06", "service_tier": "default",
              "system_fingerprint": "fp_eb9dce56a8"}


def chat_text_body(n: int) -> bytes:
    """``bench_assembly.py``'s chat stream: OpenAI's chunk shape, ``data:`` only, ``[DONE]``."""
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return _dumps({**_CHAT_HEAD, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                  "finish_reason": finish}], **extra})
    payloads = [chunk({"role": "assistant", "content": "", "refusal": None})]
    payloads += [chunk({"content": WORDS[i % len(WORDS)]}, usage=None) for i in range(n)]
    payloads.append(chunk({}, "stop", usage=None))
    return "".join(f"data: {p}\n\n" for p in payloads).encode() + b"data: [DONE]\n\n"


def gemini_text_body(n: int) -> bytes:
    """``bench_gemini.py``'s shape (CRLF framing, Google's spacing), one word per event."""
    payloads = []
    for i in range(n):
        cand: dict[str, Any] = {"content": {"parts": [{"text": WORDS[i % len(WORDS)]}],
                                            "role": "model"}, "index": 0}
        if i == n - 1:
            cand["finishReason"] = "STOP"
        usage = {"promptTokenCount": 12, "totalTokenCount": 12 + i,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}]}
        payloads.append({"candidates": [cand], "usageMetadata": usage,
                         "modelVersion": "gemini-2.5-flash",
                         "responseId": "0J-HaJetAqv0jrEPwu-tsQ0"})
    return "".join(f"data: {json.dumps(p, separators=(',', ': '), ensure_ascii=False)}\r\n\r\n"
                   for p in payloads).encode()


def event_reads(body: bytes) -> list[bytes]:
    sep = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
    return [e + sep for e in body.split(sep) if e]


def parse_only(fmt: str, reads: list[bytes]) -> str:
    parser = StreamParser(format=fmt)
    feed = parser.feed
    for read in reads:
        feed(read)
    parser.close()
    return parser.reply.choices[0].text


def per_delta(n: int, rounds: int) -> None:
    bodies = {"chat_completions": chat_text_body(n), "responses": responses_text_body(n),
              "anthropic_messages": anthropic_text_body(n), "gemini": gemini_text_body(n)}
    text = "".join(WORDS[i % len(WORDS)] for i in range(n))
    print(f"\nparser CPU per delta, every API: the same {n:,} text deltas, bytes -> reply "
          f"(StreamParser, no HTTP), median of {rounds} interleaved rounds")
    print(f"  {'API':<20}{'packed us':>10}{'x chat':>8}{'spread':>14}"
          f"{'small us':>10}{'x chat':>8}{'spread':>14}")
    cells: dict[str, list[str]] = {fmt: [] for fmt in bodies}
    for cut in (reads_of, event_reads):
        reads = {fmt: cut(body) for fmt, body in bodies.items()}
        for fmt, got in reads.items():
            assert parse_only(fmt, got) == text, f"{fmt} assembled something else"
        times: dict[str, list[float]] = {fmt: [] for fmt in bodies}
        for _ in range(rounds):
            for fmt, got in reads.items():
                gc.collect()
                start = CLOCK()
                parse_only(fmt, got)
                times[fmt].append((CLOCK() - start) / n * 1e6)
        base = statistics.median(times["chat_completions"])
        for fmt, got in times.items():
            median = statistics.median(got)
            cells[fmt] += [f"{median:10.2f}", f"{median / base:7.2f}x",
                           f"{min(got):6.2f}-{max(got):<6.2f}  "]
    for fmt, row in cells.items():
        print(f"  {fmt:<20}" + "".join(row))


# --------------------------------------------------------------------------- instructions
#
# CPU time per delta spreads widely on a loaded machine; instruction counts do not depend on the
# load. Each (API, regime, size) runs in a child process under cachegrind that only loads the
# pickled reads and parses them; the same child without the parse is subtracted, and the cost
# per delta is (count at 5,000 deltas - count at 1,000) / 4,000, so the interpreter's start,
# the imports and the per-stream work cancel out.

INSTRUCTION_SIZES = (1_000, 5_000)


def _count_child(path: str, fmt: str, parse: bool) -> None:
    import pickle

    with open(path, "rb") as f:
        reads = pickle.load(f)  # written by this script a moment ago
    if parse:
        assert parse_only(fmt, reads)


def _instructions(path: str, fmt: str, parse: bool) -> int:
    import os
    import re
    import subprocess

    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--count-child", path, fmt] + (["--parse"] if parse else [])
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    assert found, err[-2000:]
    return int(found.group(1).replace(",", ""))


def per_delta_instructions() -> None:
    import pickle
    import tempfile

    print("\ninstructions per delta, every API: the same text deltas, bytes -> reply "
          "(StreamParser, no HTTP; cachegrind, (5,000 - 1,000 deltas) / 4,000)")
    print(f"  {'API':<20}{'packed':>10}{'x chat':>8}{'small':>10}{'x chat':>8}")
    makers = {"chat_completions": chat_text_body, "responses": responses_text_body,
              "anthropic_messages": anthropic_text_body, "gemini": gemini_text_body}
    per: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, make in makers.items():
            for regime, cut in (("packed", reads_of), ("small", event_reads)):
                counts = []
                for n in INSTRUCTION_SIZES:
                    path = f"{tmp}/{fmt}-{regime}-{n}.pkl"
                    with open(path, "wb") as f:
                        pickle.dump(cut(make(n)), f)
                    counts.append(_instructions(path, fmt, True)
                                  - _instructions(path, fmt, False))
                per[fmt, regime] = (counts[1] - counts[0]) / (
                    INSTRUCTION_SIZES[1] - INSTRUCTION_SIZES[0])
    for fmt in makers:
        row = "".join(f"{per[fmt, r]:10.0f}{per[fmt, r] / per['chat_completions', r]:7.2f}x"
                      for r in ("packed", "small"))
        print(f"  {fmt:<20}{row}")


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
    ap.add_argument("--quick", action="store_true", help="2,000 deltas, 3 repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    ap.add_argument("--per-delta", action="store_true",
                    help="only the parser's CPU per delta for every API, side by side")
    ap.add_argument("--rounds", type=int, default=9, help="rounds of the per-delta table")
    ap.add_argument("--instructions", action="store_true",
                    help="with --per-delta: instruction counts (valgrind), not CPU time")
    ap.add_argument("--count-child", nargs=2, metavar=("READS", "API"), help=argparse.SUPPRESS)
    ap.add_argument("--parse", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count_child:
        _count_child(*args.count_child, args.parse)
        return
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    if args.per_delta and args.instructions:
        per_delta_instructions()
        return
    if args.per_delta:
        per_delta(2_000 if args.quick else 20_000, 3 if args.quick else args.rounds)
        return
    n = 2_000 if args.quick else 20_000
    repeats = 3 if args.quick else args.repeats
    print(f"Python {platform.python_version()} on {platform.machine()}; pydantic "
          f"{pydantic.VERSION}, openai {openai.__version__}, anthropic "
          f"{anthropic.__version__}, httpx {httpx.__version__}; {n:,} deltas, {READ}-byte "
          f"reads, median of {repeats}, {'wall' if args.wall else 'CPU'} time")

    # The anthropic helper is quadratic in tool arguments: its tool stream is kept shorter
    # (every contender gets the same bytes).
    tool_n = n if args.quick else 5_000
    bodies = [
        ("responses", "text", responses_text_body(n), run_openai_stream,
         "openai responses.stream()"),
        ("responses", "tool", responses_tool_body(_argument_pieces(n)), run_openai_stream,
         "openai responses.stream()"),
        ("anthropic_messages", "text", anthropic_text_body(n), run_anthropic_stream,
         "anthropic messages.stream()"),
        ("anthropic_messages", "tool", anthropic_tool_body(_argument_pieces(tool_n)),
         run_anthropic_stream, "anthropic messages.stream()"),
    ]
    for fmt, label, body, sdk, sdk_name in bodies:
        reads = reads_of(body)
        events = body.count(b"\n\n")
        contenders: list[tuple[str, Callable[[], Any]]] = [
            ("fluxstream (httpx)", lambda r=reads, f=fmt: asyncio.run(run_fluxstream(r, f))),
            ("fluxstream replay (no IO)", lambda r=reads, f=fmt: run_replay(r, f)),
            ("httpx-sse + json.loads", lambda r=reads, f=fmt: asyncio.run(run_httpx_sse(r, f))),
            (sdk_name, lambda r=reads, s=sdk: asyncio.run(s(r))),
        ]
        rows, results = [], {}
        for name, fn in contenders:
            seconds, result = median_time(fn, repeats if name != sdk_name else min(repeats, 3))
            rows.append((name, seconds))
            results[name] = result
        expected = results["fluxstream (httpx)"]
        for name, result in results.items():
            assert result == expected, f"{name} assembled something else: {result} != {expected}"
        table(f"{fmt} {label} stream: {len(body):,} bytes, {events:,} events, bytes -> reply",
              rows, events, "fluxstream (httpx)")

    per_delta(n, repeats if args.quick else args.rounds)

    pieces = partial_pieces()
    size = len("".join(pieces).encode())
    print(f"\npartial arguments after every fragment: {len(pieces):,} fragments, {size:,} bytes")
    for fmt, body, sdk, sdk_name in (
        ("responses", responses_tool_body(pieces), run_openai_stream,
         "openai responses.stream()"),
        ("anthropic_messages", anthropic_tool_body(pieces), run_anthropic_stream,
         "anthropic messages.stream()"),
    ):
        evs = events_of(body)
        seconds, value = median_time(lambda e=evs, f=fmt: partial_run(e, f, 0), repeats)
        assert value == json.loads("".join(pieces)), "partial arguments differ at the end"
        print(f"  fluxstream {fmt:<20} {seconds:7.3f}s  (feed one event + partial_arguments() "
              f"after each)")
        reads = reads_of(body)
        if args.quick and sdk is run_anthropic_stream:
            limit = 300
            part, _ = median_time(
                lambda r=reads, n=limit: asyncio.run(run_anthropic_stream(r, n)), 1)
            projected = part * (len(pieces) / limit) ** 2
            print(f"  {sdk_name:<31} {part:7.3f}s  for the first {limit} fragments "
                  f"(quadratic: ~{projected:.0f}s projected for all)")
        else:
            whole, _ = median_time(lambda r=reads, s=sdk: asyncio.run(s(r)), 1)
            print(f"  {sdk_name:<31} {whole:7.3f}s  (bytes -> final message; the helper keeps "
                  f"its own partial value)")

if __name__ == "__main__":
    main()
