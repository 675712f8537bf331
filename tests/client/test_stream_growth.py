"""Growth checks for the stream/parser hot paths that once grew super-linearly, and the echo
filter.

Each growth check runs the same work at two sizes and asserts the *ratio* (or an operation
count), never an absolute time, so a loaded machine slows both sizes alike:

* continuation echo cutting: a 16k-code-point echo sent one code point per delta took 28 s
  (every delta re-tested every candidate length); it must grow linearly;
* the ``finish_grace`` check: "every choice finished" is asked only when a ``Finish``
  arrives (or content after one), never per read.

The new echo filter is also checked against the previous implementation (kept below as the
reference) on random prefixes and deltas: the same output, event for event.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from fluxstream._core.echo import EchoFilter
from fluxstream._core.progress import Progress
from fluxstream._events import Event, Finish, TextDelta
from fluxstream._timeouts import Timeouts

KEY = "k"


def run_filter(
    flt: Any, prefix_len: int, deltas: list[str], final_at_end: bool = True
) -> list[Any]:
    shifts: list[int] = []
    out: list[Any] = []
    offset = 0
    for text in deltas:
        delta: list[Event] = [TextDelta(KEY, 0, prefix_len + offset, text)]
        out += flt.filter(delta, KEY, shifts.append, False)
        offset += len(text)
    out += flt.filter([Finish(KEY, 0, "stop")], KEY, shifts.append, final_at_end)
    return [*out, ("shifts", tuple(shifts))]


def split(text: str, rng: random.Random) -> list[str]:
    pieces, i = [], 0
    while i < len(text):
        step = rng.choice([1, 1, 2, 3, 7])
        pieces.append(text[i : i + step])
        i += step
    return pieces


@pytest.mark.parametrize("seed", range(300))
def test_the_linear_echo_filter_matches_the_previous_one(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = rng.choice(["ab", "abc", "a", "the quick brown fox ", "é你🌊a"])
    prefix = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    cut = rng.randint(0, len(prefix))
    echo = prefix[cut:] if rng.random() < 0.7 else ""
    rest = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
    deltas = split(echo + rest, rng)
    low = rng.choice([1, 3, 8])
    new = run_filter(EchoFilter(prefix, low), len(prefix), deltas)
    old = run_filter(ReferenceEchoFilter(prefix, low), len(prefix), deltas)
    assert new == old, (prefix, deltas, low)


def echo_seconds(size: int) -> float:
    prefix = "".join(random.Random(size).choice("abcdefgh ") for _ in range(size))
    started = time.process_time()  # CPU time: a loaded machine's other processes do not count
    flt = EchoFilter(prefix, 8)
    out = run_filter(flt, len(prefix), list(prefix) + list("continued"))
    elapsed = time.process_time() - started
    shown = "".join(e.text for e in out if isinstance(e, TextDelta))
    assert shown == "continued"  # the whole echo is cut, the rest delivered
    return elapsed


def test_echo_cutting_grows_linearly() -> None:
    """16k code points echoed one per delta, then 4x that: the time may grow about 4x
    (12x allows for noise on a busy machine; the quadratic filter grew 16x and more)."""
    small = min(echo_seconds(16_000) for _ in range(3))
    large = min(echo_seconds(64_000) for _ in range(3))
    assert large / small < 12, (small, large)
    assert small < 5.0  # was 28 s


def test_the_finish_grace_check_is_not_per_read() -> None:
    """The "every choice finished" question is asked once per Finish, however many reads."""
    for reads in (1_000, 10_000):
        calls = 0

        def complete() -> bool:
            nonlocal calls
            calls += 1
            return False

        progress = Progress(Timeouts(stall=None, finish_grace=2.0))
        progress.start(0.0)
        delta: list[Event] = [TextDelta(KEY, 1, 0, "x")]
        for i in range(reads):  # content and heartbeat-only reads, no Finish
            progress.read(delta if i % 2 else [], float(i), complete)
        progress.read([Finish(KEY, 0, "stop")], float(reads), complete)
        assert calls == 1, reads




class ReferenceEchoFilter:
    """Cuts the overlap a provider may echo at the start of a continuation.

    After :meth:`StreamParser.begin_continuation` the new stream's text for choice 0 is held
    back until it is clear whether it starts with a suffix of the prefix that was sent (at
    least ``min_overlap`` code points, or the whole prefix when it is shorter): the longest
    such echo is dropped, the rest delivered at the right offsets.
    """

    __slots__ = ("base", "buffer", "deciding", "min_overlap", "prefix", "shift")

    def __init__(self, prefix: str, min_overlap: int) -> None:
        self.prefix = prefix
        self.min_overlap = max(1, min(min_overlap, len(prefix)))
        self.base = len(prefix)  # offset of the first continued code point
        self.buffer = ""
        self.deciding = True
        self.shift = 0

    def _decide(self, final: bool) -> int | None:
        """The echo length, or ``None`` while a longer echo is still possible."""
        prefix, buf, low = self.prefix, self.buffer, self.min_overlap
        best = 0
        for k in range(low, min(len(buf), len(prefix)) + 1):
            if prefix.endswith(buf[:k]):
                best = k
        if final or len(buf) >= len(prefix):
            return best
        # A longer echo is still possible if ``buf`` occurs in the prefix at a position from
        # which the prefix's remainder is longer than ``buf`` and at least ``low`` long.
        start = 0
        last = len(prefix) - max(low, len(buf) + 1)
        while 0 <= start <= last:
            found = prefix.find(buf, start, last + len(buf))
            if found < 0:
                break
            if len(prefix) - found > best:
                return None
            start = found + 1
        return best

    def _release(self, key: str, k: int, out: list[Event], fmt_shift: Any) -> None:
        self.deciding = False
        self.shift = k
        fmt_shift(k)
        rest = self.buffer[k:]
        self.buffer = ""
        if rest:
            out.append(TextDelta(key, 0, self.base, rest))

    def filter(self, events: list[Event], key: str, fmt_shift: Any, final: bool) -> list[Event]:
        out: list[Event] = []
        shift_batch = 0  # deltas created before the shift in this batch still need it
        for ev in events:
            if type(ev) is TextDelta and ev.choice == 0:
                if self.deciding:
                    self.buffer += ev.text
                    k = self._decide(final=False)
                    if k is not None:
                        self._release(key, k, out, fmt_shift)
                        shift_batch = k
                    continue
                if shift_batch:
                    ev = TextDelta(key, 0, ev.offset - shift_batch, ev.text)
                out.append(ev)
                continue
            if self.deciding and type(ev) is Finish and ev.choice == 0:
                k = self._decide(final=True)
                self._release(key, k or 0, out, fmt_shift)
            out.append(ev)
        if final and self.deciding:
            self._release(key, self._decide(final=True) or 0, out, fmt_shift)
        return out
