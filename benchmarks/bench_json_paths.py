"""Benchmark path events (``json_paths=True``) against re-parsing with pydantic's partial mode.

Run from the repository root::

    PYTHONPATH=$PWD python benchmarks/bench_json_paths.py            # ~1 minute
    PYTHONPATH=$PWD python benchmarks/bench_json_paths.py --quick    # smoke run

Method: two documents a model sends as tool arguments, each at 10 KB, 100 KB and 1 MB, cut
into fragments of 10 characters (a model's argument deltas are a few tokens):

* ``file``: ``{"path": ..., "mode": ..., "content": "<one long string>"}`` (a file write);
* ``records``: ``{"title": ..., "rows": [{"id": i, "name": ..., "tags": [...], "ok": ...}]}``.

Contenders, each fed every fragment and asked after it what is complete:

* **fluxstream**: ``PathParser`` (what ``StreamParser.track_paths`` runs per tool call):
  each fragment read once, its path events collected;
* **pydantic partial**: ``pydantic_core.from_json(accumulated, allow_partial=True)`` after
  every fragment -- the whole prefix re-parsed (what a client without an incremental parser
  does), without even working out which paths changed: a lower bound on its cost. Past
  ``--reparse-max`` bytes it is timed on the first fragments and projected (it is quadratic).

Checked, not only timed: at every 50th fragment (and the last) every path fluxstream announced
complete holds, in pydantic's re-parse of the same prefix, the very value the event carries.
jsonmodem (the other library the comparison names) is not on the package index this machine
reaches (``pip install jsonmodem``: no matching distribution), so it is not in the table.

CPU seconds (``time.process_time``), median of ``--repeats``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout first

import pydantic_core

from fluxstream import PathDone
from fluxstream._json_paths import PathParser
from fluxstream._parser import StreamParser

CLOCK = time.process_time
FRAGMENT = 10


def file_doc(size: int) -> str:
    line = "def handler(event):  # é ü \"quoted\" and \\ backslash\n"
    content = (line * (size // len(line) + 1))[:size]
    return json.dumps({"path": "src/app/handler.py", "mode": 420, "content": content})


def records_doc(size: int) -> str:
    rows: list[dict[str, Any]] = []
    text = ""
    while len(text) < size:
        i = len(rows)
        rows.append({"id": i, "name": f"row {i} Zürich", "tags": ["a", f"t{i % 7}"],
                     "ok": i % 3 == 0, "score": i / 8})
        if i % 64 == 0:
            text = json.dumps({"title": "records", "rows": rows})
    return json.dumps({"title": "records", "rows": rows})


DOCS: dict[str, Callable[[int], str]] = {"file": file_doc, "records": records_doc}


def fragments(text: str) -> list[str]:
    return [text[i : i + FRAGMENT] for i in range(0, len(text), FRAGMENT)]


def run_paths(pieces: list[str]) -> list[Any]:
    parser = PathParser("k", 0, 0)
    events: list[Any] = []
    for piece in pieces:
        parser.feed(piece)
        events += parser.out
        parser.out.clear()
    return events


def run_reparse(pieces: list[str], limit: int | None = None) -> int:
    acc = ""
    for piece in pieces[:limit]:
        acc += piece
        pydantic_core.from_json(acc, allow_partial=True)
    return len(acc)


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def check(pieces: list[str]) -> int:
    """Every completed path holds pydantic's value at that prefix; the paths checked."""
    parser = PathParser("k", 0, 0)
    done: list[PathDone] = []
    acc = ""
    checked = 0
    for n, piece in enumerate(pieces, 1):
        parser.feed(piece)
        done += [e for e in parser.out if isinstance(e, PathDone)]
        parser.out.clear()
        acc += piece
        if n % 50 == 0 or n == len(pieces):
            again = pydantic_core.from_json(acc, allow_partial=True)
            for event in done:
                assert at(again, event.path) == event.value, event.path
            checked += len(done)
    assert done and done[-1].path == () and done[-1].value == json.loads(acc)
    return checked


def chat_tool_body(text: str) -> list[bytes]:
    """``text`` as one Chat Completions tool call in fragments of 10 characters, in reads of
    4096 bytes: the parser's own per-delta path."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return "data: " + json.dumps(body) + "\n\n"

    calls = [chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "write", "arguments": ""}}]})]
    calls += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
              for piece in fragments(text)]
    data = ("".join(calls) + chunk({}, "tool_calls") + "data: [DONE]\n\n").encode()
    return [data[i : i + 4096] for i in range(0, len(data), 4096)]


def parse(reads: list[bytes], paths: bool) -> int:
    parser = StreamParser(format="chat_completions")
    if paths:
        parser.track_paths()
    count = 0
    for read in reads:
        count += len(parser.feed(read))
    parser.close()
    return count


def per_delta(repeats: int) -> None:
    """The parser per argument delta, path events off and on (same reads)."""
    text = file_doc(100_000)
    reads = chat_tool_body(text)
    deltas = len(fragments(text))
    print(f"\nStreamParser per tool-call delta ({deltas:,} deltas of {FRAGMENT} characters, "
          f"4096-byte reads), us, median of {repeats}")
    for paths in (False, True):
        seconds = median(lambda p=paths: parse(reads, p), repeats)  # type: ignore[misc]
        print(f"  json_paths={paths!s:<6}{seconds / deltas * 1e6:8.2f}")


def median(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 KB and 100 KB, one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reparse-max", type=int, default=200_000,
                    help="largest document re-parsed whole; past it, projected")
    args = ap.parse_args()
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    repeats = 1 if args.quick else args.repeats
    print(f"fragments of {FRAGMENT} characters; CPU seconds, median of {repeats}")
    print(f"  {'document':<10}{'size':>10}{'fragments':>11}{'events':>9}"
          f"{'fluxstream':>12}{'pydantic':>12}{'ratio':>9}{'checked':>9}")
    for name, make in DOCS.items():
        for size in sizes:
            text = make(size)
            pieces = fragments(text)
            events = run_paths(pieces)
            checked = check(pieces) if len(text) <= args.reparse_max else 0
            ours = median(lambda p=pieces: run_paths(p), repeats)  # type: ignore[misc]
            if len(text) <= args.reparse_max:
                theirs = median(lambda p=pieces: run_reparse(p), repeats)  # type: ignore[misc]
                mark = ""
            else:  # quadratic: time the first fragments, project the total
                first = max(1, len(pieces) // 20)
                part = median(lambda p=pieces, f=first: run_reparse(p, f), 1)  # type: ignore[misc]
                theirs = part * (len(pieces) / first) ** 2
                mark = "~"
            print(f"  {name:<10}{len(text):>10,}{len(pieces):>11,}{len(events):>9,}"
                  f"{ours:>12.4f}{mark + f'{theirs:.3f}':>12}{theirs / ours:>8.0f}x"
                  f"{checked:>9,}")
    per_delta(max(repeats, 5))


if __name__ == "__main__":
    main()
