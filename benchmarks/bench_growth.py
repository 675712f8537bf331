"""Growth of the sans-IO paths that were once super-linear or unbounded: each must stay linear.

Run from the repository root::

    .venv/bin/python benchmarks/bench_growth.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_growth.py --quick    # smoke run

Each path is run at sizes that double; the script prints the seconds (best of three, with the
garbage collector paused as ``timeit`` does: its full collections add a size-dependent cost
of their own to anything that builds many containers) and the growth exponent between
consecutive sizes, ``log2(t(2n) / t(n))``: about 1 is linear, 2 quadratic. Memory paths print the tracemalloc peak instead (and its ratio to the input), with
the limits that keep it bounded.

Paths:

* ``text fold``: ``ReplyAssembler.feed`` of n one-character text deltas, then the reply text
  (was 4M deltas 12 s, 8M 53 s).
* ``partial [[[``: ``PartialJSON`` (what ``partial_arguments()`` uses) on n unclosed ``[`` in
  one fragment (was 16k brackets 26 s).
* ``partial {"a":[``: the same with objects and arrays mixed, in 64 fragments.
* ``blank lines``: ``SSEDecoder.feed`` of n bytes of blank lines (LF: the C-speed path for
  reads of nothing but blank lines; CRLF: the line loop) in 64 KiB reads (decompressed
  gzip), with ``max_bytes_without_event`` set above the largest size here.
* memory: one event of n ``{"index": i}`` choices, one event of n tool calls, a reply fed
  until ``max_reply_chars``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from fluxstream._assembly import ReplyAssembler
from fluxstream._events import TextDelta
from fluxstream._limits import StreamLimits
from fluxstream._parser import StreamParser
from fluxstream._partial_json import PartialJSON
from fluxstream.errors import LimitExceededError
from fluxstream.sse import SSEDecoder


def best_of(run: Callable[[], Any], repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - started)
        finally:
            gc.enable()
    return best


def text_fold(n: int) -> Callable[[], Any]:
    deltas = [TextDelta("k", 0, i, "x") for i in range(n)]

    def run() -> None:
        asm = ReplyAssembler("k", limits=StreamLimits(max_reply_chars=1 << 40))
        feed = asm.feed
        for delta in deltas:
            feed([delta])
        assert len(asm.text_of(0)) == n

    return run


def partial_brackets(n: int) -> Callable[[], Any]:
    text = "[" * n

    def run() -> None:
        parser = PartialJSON()
        parser.feed(text)
        parser.value()

    return run


def partial_mixed(n: int) -> Callable[[], Any]:
    text = '{"a":[' * (n // 2)
    size = max(1, len(text) // 64)
    pieces = [text[i : i + size] for i in range(0, len(text), size)]

    def run() -> None:
        parser = PartialJSON()
        for piece in pieces:
            parser.feed(piece)
        parser.value()

    return run


def blank_lines(n: int, line: bytes = b"\n") -> Callable[[], Any]:
    read = line * (65536 // len(line))
    reads = max(1, n // len(read))

    def run() -> None:
        decoder = SSEDecoder(max_bytes_without_event=1 << 40)
        for _ in range(reads):
            decoder.feed(read)

    return run


def time_table(name: str, make: Callable[[int], Callable[[], Any]], sizes: list[int]) -> None:
    previous: float | None = None
    cells = []
    for n in sizes:
        seconds = best_of(make(n))
        growth = "" if previous is None else f" (x{math.log2(seconds / previous):.2f})"
        cells.append(f"{n:>9,}: {seconds:8.4f}s{growth}")
        previous = seconds
    print(f"{name:<18} " + " | ".join(cells))


def peak(action: Callable[[], Any]) -> tuple[str, int]:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        action()
        outcome = "ok"
    except LimitExceededError as exc:
        outcome = f"LimitExceededError({exc.name})"
    used = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return outcome, used


def event(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def memory_table(quick: bool) -> None:
    # 930,000 compact choices: 15.9 MiB, just within max_event_bytes (the event).
    scale = [10_000, 100_000] if quick else [10_000, 100_000, 930_000]
    for n in scale:
        data = event({"choices": [{"index": i} for i in range(n)]})
        parser = StreamParser()
        outcome, used = peak(lambda: parser.feed(data))  # noqa: B023 - called at once
        skipped = parser.reply.skipped_frames
        print(f"choices x{n:>8,}: event {len(data) / 2**20:6.1f} MiB, peak "
              f"{used / 2**20:7.1f} MiB ({used / len(data):4.1f}x) {outcome}"
              f"{' skipped frame' if skipped else ''}")
    for n in ([10_000, 30_000] if quick else [10_000, 30_000, 150_000]):
        calls = [{"index": i, "function": {"arguments": ""}} for i in range(n)]
        data = event({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]})
        parser = StreamParser()
        outcome, used = peak(lambda: parser.feed(data))  # noqa: B023 - called at once
        skipped = parser.reply.skipped_frames
        print(f"tool calls x{n:>6,}: event {len(data) / 2**20:6.1f} MiB, peak "
              f"{used / 2**20:7.1f} MiB ({used / len(data):4.1f}x) {outcome}"
              f"{' skipped frame' if skipped else ''}")
    limit = 4 * 2**20
    parser = StreamParser(limits=StreamLimits(max_reply_chars=limit))
    delta = event({"choices": [{"index": 0, "delta": {"content": "z" * 4096}}]})

    def flood() -> None:
        for _ in range(100_000):
            parser.feed(delta)

    outcome, used = peak(flood)
    print(f"reply flood: max_reply_chars {limit / 2**20:.0f} Mi, peak {used / 2**20:.1f} MiB "
          f"({used / limit:.1f}x the limit) {outcome}")
    decoder = SSEDecoder()  # default max_bytes_without_event (1 MiB)
    read = b"\n" * (64 * 2**20)  # one decompressed read of 64 MiB blank lines
    outcome, used = peak(lambda: decoder.feed(read))
    print(f"one 64 MiB read of blank lines: peak {used / 2**20:.1f} MiB beyond the read "
          f"{outcome}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    quick = parser.parse_args().quick
    doublings = 3 if quick else 4
    print("time, best of 3; (xE) = growth exponent vs the previous size, 1 = linear")
    time_table("text fold", text_fold, [250_000 * 2**k for k in range(doublings)])
    time_table("partial [[[", partial_brackets, [16_000 * 2**k for k in range(doublings)])
    time_table('partial {"a":[', partial_mixed, [16_000 * 2**k for k in range(doublings)])
    time_table("blank lines LF", blank_lines, [8 * 2**20 * 2**k for k in range(doublings)])
    time_table("blank lines CRLF", lambda n: blank_lines(n, b"\r\n"),
               [8 * 2**20 * 2**k for k in range(doublings)])
    print()
    print("memory (tracemalloc peak), default StreamLimits unless stated")
    memory_table(quick)


if __name__ == "__main__":
    main()
