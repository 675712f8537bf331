"""Benchmark fluxstream's SSE decoder against httpx-sse, openai-python and a naive decoder.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sse.py            # full run (several minutes)
    .venv/bin/python benchmarks/bench_sse.py --quick    # smoke run (seconds)
    .venv/bin/python benchmarks/bench_sse.py --instructions  # instructions per event
        # (valgrind's cachegrind; exact, independent of the machine's load, ~15 minutes)

What is measured (see benchmarks/README.md, "SSE decoder", for the method and figures):

* Every contender decodes the *same* list of reads (``bytes``) in the same process, one after
  another, ``--repeats`` times; the table shows medians (``time.perf_counter``).
* The decoders are compared at the decoder level, without any HTTP machinery, so that the
  figures measure SSE decoding alone:

  - ``fluxstream``: ``SSEDecoder.feed(read)`` for each read, then ``close()``.
  - ``httpx-sse``: exactly what ``EventSource.aiter_sse()`` does per read, minus httpx:
    an incremental UTF-8 decoder (``codecs.getincrementaldecoder("utf-8")(errors="replace")``,
    which is what ``response.aiter_text()`` uses), then ``httpx_sse._decoders.SSELineDecoder``
    and ``SSEDecoder.decode(line.rstrip("\\n"))`` per line.
  - ``openai``: ``openai._streaming.SSEDecoder().iter_bytes(iter(reads))``, its public entry
    point (a bytes-level line splitter plus the per-line decoder).
  - ``naive``: the decoder blog posts teach: ``read.decode()`` on each read on its own,
    ``buffer += text``, ``buffer.find("\\n\\n")``, slice, ``split("\\n")``. It is quadratic for
    large events and wrong for characters split between reads (shown by the ``ok`` column).

* Inputs: (a) chat deltas, (b) tool calls, (c) one 5 MB event, (d) heartbeats + CRLF +
  ``event``/``id`` lines, (e) the chat stream of (a) with an ``id: N`` line before every event.
* ``--e2e`` adds an async, end-to-end table at 1024-byte reads: each async contender reads an
  ``httpx.Response`` whose body is an async iterator of the same reads (via
  ``httpx.MockTransport``), so httpx's own per-read overhead is the same for every contender.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import gc
import itertools
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

import httpx
import httpx_sse
import openai
from httpx_sse._decoders import SSEDecoder as HxDecoder
from httpx_sse._decoders import SSELineDecoder as HxLineDecoder
from openai._streaming import SSEDecoder as OpenAIDecoder

from fluxstream.sse import SSEDecoder, aiter_events

# --------------------------------------------------------------------------- inputs

WORDS = (
    "The",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " the",
    " lazy",
    " dog",
    ".",
    " Streaming",
    " tokens",
    " arrive",
    " one",
    " by",
    " one",
    ",",
    " naïve",
    " café",
    " 東京",
    " 🚀",
    " résumé",
    "\n\n",
    " **bold**",
    " `code`",
    ' "quoted"',
    " 42",
)


def chunk_json(i: int, delta: dict[str, object], finish: str | None = None) -> str:
    obj = {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_eb9dce56a8",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    # ensure_ascii=False: OpenAI sends non-ASCII text as raw UTF-8.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def chat_stream(deltas: int) -> bytes:
    """(a) A realistic chat completion: role chunk, ``deltas`` content chunks, finish, [DONE]."""
    out = [f"data: {chunk_json(0, {'role': 'assistant', 'content': '', 'refusal': None})}\n\n"]
    for i in range(deltas):
        out.append(f"data: {chunk_json(i, {'content': WORDS[i % len(WORDS)]})}\n\n")
    out.append(f"data: {chunk_json(deltas, {}, 'stop')}\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def tool_stream(fragments_per_call: int) -> bytes:
    """(b) Four parallel tool calls whose argument fragments arrive interleaved."""
    out = []
    for call in range(4):
        delta = {
            "tool_calls": [
                {
                    "index": call,
                    "id": f"call_{call}abcDEF123",
                    "type": "function",
                    "function": {"name": f"get_weather_{call}", "arguments": ""},
                }
            ]
        }
        out.append(f"data: {chunk_json(0, delta)}\n\n")
    frags = (
        '{"',
        "location",
        '":"',
        "San",
        " Francisco",
        ", CA",
        '","',
        "unit",
        '":"',
        "celsius",
        '","',
        "days",
        '":',
        "3",
        ',"note":"',
        "überall",
        '"}',
    )
    for i in range(fragments_per_call):
        for call in range(4):
            delta = {
                "tool_calls": [{"index": call, "function": {"arguments": frags[i % len(frags)]}}]
            }
            out.append(f"data: {chunk_json(i, delta)}\n\n")
    out.append(f"data: {chunk_json(0, {}, 'tool_calls')}\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def big_event(size: int, line: int = 100) -> bytes:
    """(c) One event of ``size`` bytes made of ``data:`` lines of about ``line`` bytes."""
    payload = ("0123456789abcdef" * (line // 16 + 1))[: line - 7]  # "data: " + payload + "\n"
    one = f"data: {payload}\n".encode()
    return one * max(1, size // len(one)) + b"\n"


def heartbeat_stream(events: int) -> bytes:
    """(d) CRLF line endings, ``event``/``id`` fields and a ``: ping`` heartbeat every 3 events."""
    out = []
    for i in range(events):
        if i % 3 == 0:
            out.append(": ping\r\n\r\n")
        out.append(
            f"event: delta\r\nid: {i}\r\ndata: {chunk_json(i, {'content': WORDS[i % len(WORDS)]})}\r\n\r\n"
        )
    return "".join(out).encode()


def id_chat_stream(deltas: int) -> bytes:
    """(e) The chat stream of (a) with an ``id: N`` line before every event, as servers that
    support ``Last-Event-ID`` resume write it (``fluxstream serve`` among them)."""
    out = [f"id: 0\ndata: {chunk_json(0, {'role': 'assistant', 'content': ''})}\n\n"]
    for i in range(deltas):
        out.append(f"id: {i + 1}\ndata: {chunk_json(i, {'content': WORDS[i % len(WORDS)]})}\n\n")
    out.append(f"id: {deltas + 1}\ndata: {chunk_json(deltas, {}, 'stop')}\n\n")
    out.append(f"id: {deltas + 2}\ndata: [DONE]\n\n")
    return "".join(out).encode()


def split_fixed(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def split_events(stream: bytes) -> list[bytes]:
    """One read per event (a heartbeat is an event here too): split after each blank line."""
    sep = b"\r\n\r\n" if b"\r\n\r\n" in stream else b"\n\n"
    parts = stream.split(sep)
    reads = [p + sep for p in parts[:-1]]
    if parts[-1]:
        reads.append(parts[-1])
    return reads


def prefix_events(stream: bytes, limit: int) -> bytes:
    """The first whole events of ``stream`` that fit in about ``limit`` bytes."""
    if len(stream) <= limit:
        return stream
    sep = b"\r\n\r\n" if b"\r\n\r\n" in stream else b"\n\n"
    cut = stream.rfind(sep, 0, limit)
    return stream[: cut + len(sep)] if cut > 0 else stream[:limit]


# --------------------------------------------------------------------------- contenders
# Each contender comes twice. The timed function consumes the events the way an application
# does (each one is looked at once and dropped) and returns their number; keeping 20,000
# events alive would mostly time the garbage collector walking them. The checked function
# returns the data of every event, compared (untimed) with fluxstream's one-read result.


def _httpx_sse_events(reads: list[bytes]) -> Iterator[object]:
    text_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    line_decoder = HxLineDecoder()
    decoder = HxDecoder()
    for read in reads:
        text = text_decoder.decode(read)
        if not text:
            continue
        for line in line_decoder.decode(text):
            sse = decoder.decode(line.rstrip("\n"))
            if sse is not None:
                yield sse
    tail = text_decoder.decode(b"", True)
    for line in (line_decoder.decode(tail) if tail else []) + line_decoder.flush():
        sse = decoder.decode(line.rstrip("\n"))
        if sse is not None:
            yield sse


def time_fluxstream(reads: list[bytes]) -> int:
    decoder = SSEDecoder(max_event_bytes=1 << 30)
    feed = decoder.feed
    n = 0
    for read in reads:
        n += len(feed(read))
    return n + len(decoder.close())


def time_httpx_sse(reads: list[bytes]) -> int:
    # Inlined (not via _httpx_sse_events) so that no generator is added to its cost.
    text_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    line_decoder = HxLineDecoder()
    decoder = HxDecoder()
    n = 0
    for read in reads:
        text = text_decoder.decode(read)
        if not text:
            continue
        for line in line_decoder.decode(text):
            if decoder.decode(line.rstrip("\n")) is not None:
                n += 1
    tail = text_decoder.decode(b"", True)
    for line in (line_decoder.decode(tail) if tail else []) + line_decoder.flush():
        if decoder.decode(line.rstrip("\n")) is not None:
            n += 1
    return n


def time_openai(reads: list[bytes]) -> int:
    n = 0
    for _ in OpenAIDecoder().iter_bytes(iter(reads)):
        n += 1
    return n


def naive_events(reads: list[bytes]) -> Iterator[str]:
    """What a blog post teaches. Decodes each read alone ("replace" so that it does not crash)."""
    buffer = ""
    for read in reads:
        buffer += read.decode("utf-8", "replace").replace("\r\n", "\n")
        while True:
            end = buffer.find("\n\n")
            if end < 0:
                break
            block, buffer = buffer[:end], buffer[end + 2 :]
            data = []
            for line in block.split("\n"):
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
            if data:
                yield "\n".join(data)


def time_naive(reads: list[bytes]) -> int:
    n = 0
    for _ in naive_events(reads):
        n += 1
    return n


def check_fluxstream(reads: list[bytes]) -> list[str]:
    decoder = SSEDecoder(max_event_bytes=1 << 30)
    out = [e for read in reads for e in decoder.feed(read)] + decoder.close()
    return [e.data for e in out]


CHECKS: dict[str, Callable[[list[bytes]], list[str]]] = {
    "fluxstream": check_fluxstream,
    # Blocks without data (none in these inputs) would be empty events there: filtered.
    "httpx-sse": lambda reads: [e.data for e in _httpx_sse_events(reads) if e.data],  # type: ignore[attr-defined]
    "openai": lambda reads: [e.data for e in OpenAIDecoder().iter_bytes(iter(reads)) if e.data],
    "naive": lambda reads: list(naive_events(reads)),
}
CONTENDERS: dict[str, Callable[[list[bytes]], int]] = {
    "fluxstream": time_fluxstream,
    "httpx-sse": time_httpx_sse,
    "openai": time_openai,
    "naive": time_naive,
}


# --------------------------------------------------------------------------- timing


def measure_round_robin(names: list[str], reads: list[bytes], repeats: int) -> dict[str, float]:
    """Medians of ``repeats`` runs per contender, interleaved so that machine noise (two noisy
    cores) hits every contender alike instead of one unlucky contender's whole series."""
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(repeats):
        for name in names:
            fn = CONTENDERS[name]
            gc.collect()
            t0 = time.process_time()
            fn(reads)
            times[name].append(time.process_time() - t0)
    return {n: statistics.median(t) for n, t in times.items()}


def fit_exponent(sizes: list[int], times: list[float]) -> float:
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


# --------------------------------------------------------------------------- end to end


async def _e2e(name: str, reads: list[bytes]) -> int:
    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            yield read

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for read in body():
                yield read

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Stream())

    n = 0
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
        client.stream("GET", "http://bench.invalid/") as response,
    ):
        if name == "fluxstream":
            async for _ in aiter_events(response.aiter_bytes()):
                n += 1
        elif name == "httpx-sse":
            async for _ in httpx_sse.EventSource(response).aiter_sse():
                n += 1
        elif name == "openai":
            async for _ in OpenAIDecoder().aiter_bytes(response.aiter_bytes()):
                n += 1
    return n


def e2e_time(name: str, reads: list[bytes], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.process_time()
        asyncio.run(_e2e(name, reads))
        times.append(time.process_time() - t0)
    return statistics.median(times)


# --------------------------------------------------------------------------- instructions
#
# CPU time spreads widely on a loaded machine; instruction counts do not depend on the load.
# Each (input, read size) runs in a child process under cachegrind that loads the pickled
# reads and decodes them with a fresh SSEDecoder each time, once and then three times; the
# cost per event is (count of three - count of one) / (2 x the events), so everything but the
# decode (the interpreter's start and end, the imports, the load) is the same in both runs
# and cancels out. (c), one event, is counted per 1,000 bytes instead. In the fixed world
# _instructions() runs the children in, a count is exact: the same from run to run.

#: Events (for (c): bytes) of each row's input; one-byte reads cost ~1 us each even without
#: valgrind, so their inputs are shorter.
INSTRUCTION_LENGTHS = {"": 2_000, "1": 300, "c": 512 * 1024, "c1": 128 * 1024}

#: The child: Python without this script's imports (httpx, openai, ...) and without
#: ``fluxstream/__init__.py`` (pydantic), so that the start costs little under valgrind; the
#: objects alive before the decode are frozen out of the garbage collector's passes (else
#: their number, which the imports decide, is counted in every pass the decodes trigger).
#: The decode is :func:`time_fluxstream`'s loop.
_CHILD = """
import gc, pickle, sys, types
package = types.ModuleType("fluxstream")
package.__path__ = [sys.argv[3]]  # the package this script imported, whatever the cwd
sys.modules["fluxstream"] = package
from fluxstream.sse import SSEDecoder
with open(sys.argv[1], "rb") as f:
    reads = pickle.load(f)
gc.freeze()
for _ in range(int(sys.argv[2])):
    decoder = SSEDecoder(max_event_bytes=1 << 30)
    feed = decoder.feed
    n = 0
    for read in reads:
        n += len(feed(read))
    assert n + len(decoder.close())
"""


def _instructions(path: str, times: int, cwd: str) -> int:
    """Instructions of a child that decodes the reads at ``path`` ``times`` times.

    The child's count is exact from run to run only in a fixed world: hash seed fixed, no
    environment but ``PATH``, ``-P`` and an empty ``cwd`` (run from a busy ``/tmp`` with the
    shell's environment, counts moved by 0.8-3 M now and then).
    """
    import os
    import re
    import subprocess

    import fluxstream

    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-P", "-c", _CHILD, path, str(times),
           str(Path(fluxstream.__file__).parent)]
    env = {"PYTHONHASHSEED": "0", "PATH": os.environ.get("PATH", "")}
    for _ in range(3):  # valgrind itself fails now and then on a crowded machine
        done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if done.returncode == 0 and found:
            return int(found.group(1).replace(",", ""))
    raise RuntimeError(done.stderr[-2000:])


def instruction_inputs(letter: str, n: int) -> bytes:
    """Input ``letter`` with about ``n`` events ((c): one event of ``n`` bytes)."""
    if letter == "a":
        return chat_stream(n)
    if letter == "b":
        return tool_stream(n // 4)
    if letter == "c":
        return big_event(n)
    if letter == "d":
        return heartbeat_stream(n)
    return id_chat_stream(n)


def instructions(letters: str, sizes: list[int | str], runs: int) -> None:
    """Instructions per event (per 1,000 bytes for (c)) of every row, from the least of
    ``runs`` counts of each child."""
    import pickle
    import tempfile

    import fluxstream

    print(f"# instructions per event, SSEDecoder alone (cachegrind, least of {runs}); "
          f"fluxstream from {Path(fluxstream.__file__).parent}")
    print("| input | read | instructions per event (c: per 1,000 bytes) |")
    print("|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as empty:
        for letter in letters:
            for rs in sizes:
                key = ("c" if letter == "c" else "") + ("1" if rs == 1 else "")
                src = instruction_inputs(letter, INSTRUCTION_LENGTHS[key])
                reads = split_events(src) if rs == "event" else split_fixed(src, int(rs))
                path = f"{tmp}/{letter}-{rs}.pkl"
                with open(path, "wb") as f:
                    pickle.dump(reads, f)
                units = len(src) / 1000 if letter == "c" else len(check_fluxstream(reads))
                _instructions(path, 0, empty)  # the first run may write the bytecode caches
                # The least of ``runs`` counts each (they agree exactly in the fixed world
                # of _instructions; the least keeps out a stray one).
                once = min(_instructions(path, 1, empty) for _ in range(runs))
                thrice = min(_instructions(path, 3, empty) for _ in range(runs))
                per = (thrice - once) / (2 * units)
                print(f"| {letter} | {rs} | {per:,.0f} |", flush=True)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, 3 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per cell (default 9)")
    parser.add_argument("--e2e", action="store_true", help="also time async end to end over httpx")
    parser.add_argument("--no-growth", action="store_true", help="skip the growth-exponent fit")
    parser.add_argument("--growth-only", action="store_true", help="only the growth-exponent fit")
    parser.add_argument("--only", default="", help="comma-separated input letters, e.g. a,c")
    parser.add_argument("--instructions", action="store_true",
                        help="instruction counts per event (valgrind), not CPU time")
    parser.add_argument("--reads", default="1,64,1024,16384,event",
                        help="with --instructions: the read sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=1,
                        help="with --instructions: runs per count (the least is kept)")
    args = parser.parse_args()
    if args.instructions:
        sizes = [s if s == "event" else int(s) for s in args.reads.split(",")]
        letters = "".join(s.strip() for s in args.only.split(",")) or "abcde"
        instructions(letters, sizes, args.runs)
        return

    quick = args.quick
    repeats = args.repeats or (3 if quick else 9)
    if args.growth_only:
        print(growth(quick, repeats))
        return
    if repeats < 5 and not quick:
        parser.error("use at least 5 repeats (medians)")
    inputs = {
        "a chat 20k deltas": chat_stream(2_000 if quick else 20_000),
        "b 4 tool calls": tool_stream(500 if quick else 2_500),
        "c one 5 MB event": big_event((512 if quick else 5 * 1024) * 1024),
        "d heartbeats CRLF": heartbeat_stream(1_500 if quick else 15_000),
        "e chat with id: lines": id_chat_stream(2_000 if quick else 20_000),
    }
    if args.only:
        keep = {s.strip() for s in args.only.split(",")}
        inputs = {k: v for k, v in inputs.items() if k[0] in keep}
    # One-byte reads cost ~1 us per read and contender: decode a prefix of whole events instead
    # of the full input (same prefix for every contender; MB/s is a per-byte rate anyway).
    one_byte_cap = 32 * 1024 if quick else 256 * 1024
    read_sizes: list[int | str] = [1, 64, 1024, 16384, "event"]

    print(
        f"# fluxstream SSE benchmark  python {platform.python_version()}  "
        f"httpx-sse {httpx_sse.__version__ if hasattr(httpx_sse, '__version__') else '?'}  "
        f"openai {openai.__version__}  repeats={repeats} (medians)"
    )
    print()
    header = (
        f"| input | read | MB | events | {' | '.join(f'{n} MB/s' for n in CONTENDERS)} "
        "| fluxstream events/s | x httpx-sse | x openai | x naive | ok |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    summary: dict[tuple[str, str], dict[str, float]] = {}
    for label, stream in inputs.items():
        for rs in read_sizes:
            src = stream
            if rs == 1:
                src = (
                    big_event(one_byte_cap)
                    if label.startswith("c")
                    else prefix_events(stream, one_byte_cap)
                )
            reads = split_events(src) if rs == "event" else split_fixed(src, int(rs))
            if label.startswith("c") and rs == "event":
                reads = [src]  # the one event is one read
            names = list(CONTENDERS)
            if (label.startswith("c") and rs in (1, 64, 1024)) or (
                label.startswith("d") and rs == 1
            ):
                # Quadratic there: minutes. (In 1-byte reads of (d) no CR and LF meet in one
                # read, so its replace("\r\n", "\n") never matches and its buffer never
                # holds a blank line: it only grows.) Its growth is measured below.
                names.remove("naive")
            reference = check_fluxstream([src])
            ok = {n: CHECKS[n](reads) == reference for n in names}
            medians = measure_round_robin(names, reads, repeats)
            mb = len(src) / 1e6
            rates = {n: mb / t for n, t in medians.items()}
            summary[(label, str(rs))] = rates
            cells = " | ".join(f"{rates[n]:.1f}" if n in rates else "skipped" for n in CONTENDERS)
            fx = rates["fluxstream"]
            ratios = " | ".join(
                f"{fx / rates[n]:.2f}x" if n in rates else "-"
                for n in ("httpx-sse", "openai", "naive")
            )
            oks = ",".join(n for n in names if not ok[n]) or "all"
            if oks != "all":
                oks = "wrong: " + oks
            print(
                f"| {label} | {rs} | {mb:.2f} | {len(reference)} | {cells} | "
                f"{len(reference) / medians['fluxstream']:,.0f} | {ratios} | {oks} |",
                flush=True,
            )

    # Targets: the aggregate over inputs (a), (b), (d), the event-stream shapes of LLM traffic,
    # as the ratio of total time; (c) is reported per row above.
    print()
    print(
        "## Targets (ratio of summed decode time over inputs a, b, d, and over a, b, d, e; "
        "fluxstream vs anchor)"
    )
    for (rs, anchor, target), group in itertools.product(
        [
            ("1024", "httpx-sse", 2.0),
            ("1024", "openai", 2.0),
            ("event", "httpx-sse", 2.0),
            ("event", "openai", 2.0),
            ("1", "openai", 1.5),
        ],
        ("abd", "abde"),
    ):
        keys = [k for k in summary if k[1] == rs and k[0][0] in group]
        if not keys:
            continue
        # Sum of per-input times for 1 MB of each input: ratio of the harmonic-mean rates.
        t_fx = sum(1 / summary[k]["fluxstream"] for k in keys)
        t_an = sum(1 / summary[k][anchor] for k in keys)
        ratio = t_an / t_fx
        per = ", ".join(
            f"{k[0][0]} {summary[k]['fluxstream'] / summary[k][anchor]:.2f}x" for k in keys
        )
        print(
            f"- read {rs}, inputs {','.join(group)}: fluxstream vs {anchor}: {ratio:.2f}x "
            f"(target >= {target}x: "
            f"{'met' if ratio >= target else 'NOT met'}; per input {per})"
        )

    if args.e2e:
        print()
        print("## End to end, async over an httpx.Response (httpx.MockTransport), 1024-byte reads")
        print(
            "| input | read | "
            + " | ".join(f"{n} MB/s" for n in ("fluxstream", "httpx-sse", "openai"))
            + " | x httpx-sse | x openai |"
        )
        print("|---|---|---|---|---|---|---|")
        for label, stream in inputs.items():
            reads = split_fixed(stream, 1024)
            mb = len(stream) / 1e6
            t = {n: e2e_time(n, reads, repeats) for n in ("fluxstream", "httpx-sse", "openai")}
            cells = " | ".join(f"{mb / x:.1f}" for x in t.values())
            print(
                f"| {label} | 1024 | {cells} | {t['httpx-sse'] / t['fluxstream']:.2f}x "
                f"| {t['openai'] / t['fluxstream']:.2f}x |",
                flush=True,
            )

    if not args.no_growth:
        print()
        print("## Growth: one event of N bytes in 64-byte reads; slope of log(time) vs log(N)")
        print(growth(quick, repeats))


def growth_times(fn: Callable[[list[bytes]], int], sizes: list[int], repeats: int) -> list[float]:
    """Median time per size, the sizes interleaved within each repeat (as in the tables) so
    that a burst of load on the shared machine does not bend the fit by hitting one size."""
    all_reads = [split_fixed(big_event(size), 64) for size in sizes]
    times: list[list[float]] = [[] for _ in sizes]
    for _ in range(repeats):
        for i, reads in enumerate(all_reads):
            gc.collect()
            t0 = time.process_time()
            fn(reads)
            times[i].append(time.process_time() - t0)
    return [statistics.median(t) for t in times]


def growth(quick: bool, repeats: int) -> str:
    mib = 1024 * 1024
    sizes = [int(s * mib) for s in ((1, 2) if quick else (1, 1.5, 2, 3, 4, 6, 8))]
    t = growth_times(time_fluxstream, sizes, 3 if quick else max(7, repeats))
    lines = [
        f"- fluxstream, 1-8 MB: exponent {fit_exponent(sizes, t):.2f} "
        f"(times {', '.join(f'{x * 1e3:.0f} ms' for x in t)})"
    ]
    nsizes = [s * 1024 for s in ((32, 64) if quick else (64, 128, 256, 512))]
    t = growth_times(time_naive, nsizes, 3 if quick else 5)
    lines.append(
        f"- naive, {nsizes[0] // 1024}-{nsizes[-1] // 1024} KB only (quadratic: 8 MB would take "
        f"~{t[-1] * (8 * mib / nsizes[-1]) ** 2 / 60:.0f} min): exponent "
        f"{fit_exponent(nsizes, t):.2f} (times {', '.join(f'{x * 1e3:.0f} ms' for x in t)})"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
