"""What a continuation's echo is, and how it is cut.

A continuation sends the text delivered so far as the assistant's partial answer, and a
provider may start its answer by writing the end of that text again. What it writes again is
an echo: a suffix of the prefix that was sent, at least ``min_overlap`` code points long (or
the whole prefix, when that is shorter), or the trailing whitespace that was not sent with it
(providers refuse a prefill that ends in whitespace). :func:`continuation` says what to send
and gives the :class:`EchoFilter` that cuts the echo from the new stream's first events, so
nothing is shown twice and offsets go on where they stopped.

Kept apart from :class:`~fluxstream._parser.StreamParser` because it is its own rule (held text,
a decision, a shift of the format's offsets) that holds only at the start of a continuation:
the parser runs the filter over what it delivers while one is deciding, then drops it.
"""

from __future__ import annotations

from collections.abc import Callable

from .._events import Event, Finish, TextDelta

__all__ = ["EchoFilter", "Shift", "continuation"]

#: Moves the wire format's text offsets of choice 0 back by the length of the echo cut, so the
#: text after it is delivered at the offsets the reply goes on from.
Shift = Callable[[int], object]


def continuation(prefix: str, min_overlap: int) -> tuple[str, EchoFilter]:
    """The assistant prefix to send for a continuation of ``prefix`` (the text of choice 0 so
    far), and the filter that cuts what the provider echoes of it.

    The prefix is sent without trailing whitespace (Anthropic, and others, refuse a prefill
    that ends in whitespace; an all-whitespace prefix is sent as it is); the whitespace the
    provider then writes again at the start is cut as an echo too, however short."""
    sent = prefix.rstrip() or prefix
    return sent, EchoFilter(prefix, min_overlap, forced=len(prefix) - len(sent))


class EchoFilter:
    """Cuts the overlap a provider may echo at the start of a continuation.

    After a continuation is asked (:func:`continuation`) the new stream's text for choice 0
    is held back until it is clear whether it starts with a suffix of the prefix that was sent
    (at least ``min_overlap`` code points, or the whole prefix when it is shorter): the
    longest such echo is dropped, the rest delivered at the right offsets.

    Linear in the echoed text (a 16k-code-point echo sent one code point per delta took 28 s
    when every delta re-tested every candidate length). Per code point ``c`` appended to the
    held text ``buf`` (length ``L``):

    * "``buf`` is a suffix of the prefix" is a comparison of two polynomial hashes, each
      updated in O(1): ``buf`` grows at its end, the prefix's suffix of length ``L`` at its
      start;
    * "a longer echo is still possible" needs the leftmost position where ``buf`` occurs in the
      prefix: it stays put while the next code point matches there, and only moves (one
      ``str.find`` from the old position on) when it does not.
    """

    __slots__ = (
        "_hash_buf", "_hash_pre", "_power", "_start", "base", "best", "deciding", "forced",
        "held", "min_overlap", "parts", "prefix", "shift", "size",
    )

    _MOD = (1 << 61) - 1
    _BASE = 1_000_003

    def __init__(self, prefix: str, min_overlap: int, *, forced: int = 0) -> None:
        self.prefix = prefix
        self.min_overlap = max(1, min(min_overlap, len(prefix)))
        #: An echo of exactly this length counts however short: the trailing whitespace
        #: that was not sent with the prefix (see :func:`continuation`).
        self.forced = forced
        self.base = len(prefix)  # offset of the first continued code point
        self.parts: list[str] = []  # the held text
        self.held = 0  # its length
        self.size = 0  # how much of it was tested (testing stops once the outcome is clear)
        self.deciding = True
        self.shift = 0
        self.best = 0  # the longest echo seen so far (>= min_overlap)
        self._hash_buf = 0  # sum of buf[i] * B**i
        self._hash_pre = 0  # the same for prefix[-size:]
        self._power = 1  # B**size
        self._start = 0  # leftmost occurrence of buf in the prefix; -1: none

    @property
    def buffer(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def _add(self, text: str) -> None:
        prefix, n, mod, base = self.prefix, len(self.prefix), self._MOD, self._BASE
        low = self.min_overlap
        forced = self.forced
        start = self._start
        size = self.size
        hash_buf, hash_pre, power = self._hash_buf, self._hash_pre, self._power
        for position, char in enumerate(text):
            if size >= n:
                break  # no echo is longer than the prefix
            code = ord(char)
            hash_buf = (hash_buf + code * power) % mod
            hash_pre = (ord(prefix[n - size - 1]) + base * hash_pre) % mod
            power = power * base % mod
            if start >= 0 and (start + size >= n or prefix[start + size] != char):
                held = "".join(self.parts) + text[: position + 1]
                start = prefix.find(held, start + 1)
            size += 1
            if hash_buf == hash_pre and (size >= low or size == forced):
                self.best = size
            if start < 0:
                break  # buf occurs nowhere in the prefix: no longer echo can come
        self._start = start
        self.size = size
        self._hash_buf, self._hash_pre, self._power = hash_buf, hash_pre, power
        self.parts.append(text)
        self.held += len(text)

    def _decide(self, final: bool) -> int | None:
        """The echo length, or ``None`` while a longer echo is still possible."""
        held = self.held
        n = len(self.prefix)
        if (
            not final
            and held < n
            and self._start >= 0
            and held <= self.size
            and (
                # A longer echo needs ``buf`` to occur where the prefix's remainder is longer
                # than ``buf`` and at least ``min_overlap`` long,
                self._start <= n - max(self.min_overlap, held + 1)
                # or ``buf`` to be the start of the whitespace that was not sent.
                or (held < self.forced and self.prefix.startswith(self.buffer, n - self.forced))
            )
        ):
            return None
        return self._checked(self.best)

    def _checked(self, k: int) -> int:
        """``k`` once the text proves it (equal hashes, different text: a crafted collision
        must not cut text); else the longest echo found the slow way (never in practice)."""
        buf, prefix = self.buffer, self.prefix
        if k == 0 or prefix.endswith(buf[:k]):
            return k
        low = self.min_overlap
        found = (j for j in range(k - 1, 0, -1) if j >= low or j == self.forced)
        return next((j for j in found if prefix.endswith(buf[:j])), 0)

    def _release(self, key: str, k: int, out: list[Event], fmt_shift: Shift) -> None:
        self.deciding = False
        self.shift = k
        fmt_shift(k)
        rest = self.buffer[k:]
        self.parts = []
        self.held = 0
        if rest:
            out.append(TextDelta(key, 0, self.base, rest))

    def filter(self, events: list[Event], key: str, fmt_shift: Shift, final: bool) -> list[Event]:
        out: list[Event] = []
        shift_batch = 0  # deltas created before the shift in this batch still need it
        for ev in events:
            if type(ev) is TextDelta and ev.choice == 0:
                if self.deciding:
                    self._add(ev.text)
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
