"""The properties a streaming app's tests state most, one line each.

Each helper raises ``AssertionError`` with a message that says what went wrong where (the
offset of the first repeated character, how long the upstream waited for a close, which log
record held which secret), and never prints a secret: a failing test's output is a log too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..server.records import DisconnectRecord
from ._upstream import Upstream

__all__ = ["assert_no_secret_logged", "assert_no_text_twice", "assert_upstream_closed"]

#: Characters of context shown around the place two texts part.
_CONTEXT = 24


def _joined(shown: str | Iterable[str]) -> str:
    return shown if isinstance(shown, str) else "".join(shown)


def _common(a: str, b: str) -> int:
    """The length of the common start of ``a`` and ``b``."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _repeat(text: str, expected: str, at: int) -> tuple[int, int] | None:
    """Where ``text`` starts over an earlier part of ``expected`` after agreeing with it up to
    ``at``: ``(offset in text, offset of the part shown again)``, or ``None``."""
    rest = text[at:]
    if not rest:
        return None
    best, length = -1, 0
    for earlier in range(at):
        common = _common(rest, expected[earlier:at + len(rest)])
        if common >= length and common > 0:
            best, length = earlier, common
    if best < 0 or length < min(len(rest), 2):
        return None
    start = at
    while start > 0 and best > 0 and text[start - 1] == expected[best - 1]:
        start, best = start - 1, best - 1
    return start, best


def assert_no_text_twice(shown: str | Iterable[str], expected: str, *,
                         complete: bool = True) -> None:
    """What the app showed (its text, or the deltas it printed) is ``expected`` with no
    character twice and none lost: equal to it, or (``complete=False``, a reply that ended
    early) the start of it."""
    text = _joined(shown)
    if text == expected or (not complete and expected.startswith(text)):
        return
    at = next((i for i, (a, b) in enumerate(zip(text, expected, strict=False)) if a != b),
              min(len(text), len(expected)))
    around = text[max(0, at - _CONTEXT): at + _CONTEXT]
    repeat = _repeat(text, expected, at)
    if repeat is not None:
        start, earlier = repeat
        shown_again = text[start: start + _CONTEXT]
        raise AssertionError(
            f"text shown twice: at offset {start} the reply repeats what it showed from "
            f"offset {earlier} ({shown_again!r})"
        )
    if len(text) < len(expected) and complete and expected.startswith(text):
        raise AssertionError(f"text lost: the reply shows {len(text)} of {len(expected)} "
                             f"characters, it stops after {around!r}")
    raise AssertionError(f"the reply differs from the expected text at offset {at}: "
                         f"{around!r} shown, {expected[max(0, at - _CONTEXT): at + _CONTEXT]!r} "
                         "expected")


def assert_upstream_closed(upstream: Upstream, *, timeout: float = 2.0,
                           mid_reply: bool = True) -> DisconnectRecord:
    """The client closed its connection to ``upstream`` within ``timeout`` seconds (by then
    it has stopped reading and freed the socket, as a cancel must), and (``mid_reply``)
    before the reply was whole. Returns the record (its ``time``, ``bytes_written``)."""
    try:
        return upstream.wait_disconnect_sync(timeout, completed=False if mid_reply else None)
    except TimeoutError:
        answers = ", ".join(r.ending for r in upstream.responses) or "none"
        raise AssertionError(
            f"the upstream saw no client close {'mid-reply ' if mid_reply else ''}within "
            f"{timeout} s (its answers ended: {answers}): the connection was left open"
        ) from None


def _texts(logs: Any) -> list[tuple[str, str]]:
    """``(where, text)`` of each log line: a pytest ``caplog``, log records, or strings."""
    records = getattr(logs, "records", None)
    if records is not None:
        logs = records
    if isinstance(logs, str):
        return [("the log text", logs)]
    out = []
    for i, item in enumerate(logs):
        if isinstance(item, logging.LogRecord):
            where = f"log record {i} ({item.name}, {item.levelname})"
            text = item.getMessage()
            if item.exc_info and item.exc_info[1] is not None:
                text += "\n" + repr(item.exc_info[1])
            out.append((where, text + " " + repr(getattr(item, "__dict__", {}))))
        else:
            out.append((f"log line {i}", str(item)))
    return out


def _masked(secret: str) -> str:
    return f"{secret[:3]}…{secret[-2:]}" if len(secret) > 8 else "…"


def assert_no_secret_logged(logs: Any, *secrets: str | Upstream) -> None:
    """No secret appears in ``logs`` (pytest's ``caplog``, log records, or text): each of
    ``secrets`` is a string, or an :class:`Upstream`, which stands for every key, token,
    cookie and query key its clients sent it. A bearer value counts with and without its
    scheme."""
    values: set[str] = set()
    for secret in secrets:
        if isinstance(secret, Upstream):
            values |= secret.secrets
        else:
            values.add(secret)
    values |= {v.partition(" ")[2] for v in values if " " in v}
    values = {v for v in values if len(v) >= 4}
    if not values:
        raise AssertionError("no secret to look for: give the secrets, or an upstream that "
                             "was sent some")
    for where, text in _texts(logs):
        for value in values:
            if value in text:
                raise AssertionError(f"a secret ({_masked(value)}) reached {where}")
