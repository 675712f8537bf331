"""Taking over a reply whose producer died: resume the upstream, append to the same key.

The stored resume token is written now and then, not with every entry (it holds the whole
partial reply), so it may be *behind* the stored events or, since a stream parses a whole
read before its events are consumed, *ahead* of them. Both are made exact with offsets: what
the token holds beyond the stored events is appended first (the gap), and resumed events that
repeat stored text are trimmed to the part not stored yet. So followers see every code point
once, whichever worker produced it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from .. import apis
from .._events import (
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    TextDelta,
    ToolCallDelta,
)
from ..errors import one_line, show_key
from .codec import Entry
from .producer import RecordedStream, Recorder, background

if TYPE_CHECKING:  # pragma: no cover
    from .access import LogAccess

__all__ = ["StoredReply", "take_over"]

logger = logging.getLogger("fluxstream.relay")

_CHANNELS: dict[str, type[TextDelta] | type[ReasoningDelta] | type[RefusalDelta]] = {
    "text": TextDelta,
    "reasoning": ReasoningDelta,
    "refusal": RefusalDelta,
}


class StoredReply:
    """How far each channel of a stored reply got (code points), to trim and to fill gaps."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.lengths: dict[tuple[int, str], int] = {}
        self.calls: dict[tuple[int, int], int] = {}
        self.named: set[tuple[int, int]] = set()
        self.finishes: dict[int, str] = {}

    @classmethod
    def from_entries(cls, key: str, entries: list[Entry]) -> StoredReply:
        stored = cls(key)
        for entry in entries:
            for event in entry.events:
                stored.filter(event)
        return stored

    def filter(self, event: Event) -> list[Event]:
        """``event`` without what is stored already (``[]`` if all of it is)."""
        kind = type(event)
        if kind in (TextDelta, ReasoningDelta, RefusalDelta):
            delta: Any = event
            slot = (delta.choice, delta.type)
            have = self.lengths.get(slot, 0)
            end = delta.offset + len(delta.text)
            if end <= have:
                return []
            self.lengths[slot] = end
            if delta.offset < have:
                return [kind(delta.key, delta.choice, have, delta.text[have - delta.offset :])]
            return [event]
        if kind is ToolCallDelta:
            call: Any = event
            slot = (call.choice, call.call)
            have = self.calls.get(slot, 0)
            end = call.offset + len(call.arguments)
            if call.id is not None or call.name is not None:
                self.named.add(slot)
            if call.replace:
                self.calls[slot] = end
                return [event]
            if end <= have and call.id is None and call.name is None:
                return []
            self.calls[slot] = max(have, end)
            if call.offset < have:
                cut = call.arguments[have - call.offset :]
                return [ToolCallDelta(call.key, call.choice, call.call, call.id, call.name,
                                      cut, have)]
            return [event]
        if kind is Finish:
            finish: Any = event
            if self.finishes.get(finish.choice) == finish.reason:
                return []
            self.finishes[finish.choice] = finish.reason
            return [event]
        if kind is Reset:
            self.lengths.clear()
            self.calls.clear()
            self.named.clear()
            self.finishes.clear()
        return [event]

    def gaps(self, reply: dict[str, Any]) -> list[Event]:
        """Events for what the token's ``reply`` holds beyond the stored events."""
        out: list[Event] = []
        for choice in reply.get("choices") or []:
            index = int(choice.get("index", 0))
            for channel in ("reasoning", "text", "refusal"):
                text = choice.get(channel) or ""
                have = self.lengths.get((index, channel), 0)
                if len(text) > have:
                    out += self.filter(_CHANNELS[channel](self.key, index, have, text[have:]))
            for call in choice.get("tool_calls") or []:
                number = int(call.get("index", 0))
                slot = (index, number)
                args = call.get("arguments") or ""
                have = self.calls.get(slot, 0)
                fresh = slot not in self.named
                if len(args) > have or fresh:
                    out += self.filter(ToolCallDelta(
                        self.key, index, number,
                        call.get("id") if fresh else None,
                        call.get("name") if fresh else None,
                        args[have:], have,
                    ))
            reason = choice.get("finish_reason")
            if reason and self.finishes.get(index) != reason:
                out += self.filter(Finish(self.key, index, reason))
        return out


def _send_again(client: Any, key: str, base: dict[str, Any]) -> Any:
    """The stored request (``base``: a resume token without its reply) as a new stream, on
    the endpoint of the API it was made for (any API the registry does not know is refused
    by :func:`fluxstream.apis.for_token`)."""
    api = apis.for_token(base)  # stored input: it chooses among the registered APIs, no more
    body = dict(base.get("body") or {})
    return getattr(client, api.endpoint).stream(
        content_key=key, raise_for_outcome=False, **api.stored_body_arguments(body)
    )


async def take_over(log: LogAccess, key: str, client: Any) -> Callable[[], None] | None:
    """Take the lease of ``key`` (its producer's lapsed) and resume the upstream with
    ``client`` in a background task that records into ``log``; returns the function that
    stops it, or ``None`` if another worker holds the lease (or the reply ended)."""
    owner = log.new_owner()
    last = await log.acquire(key, owner)
    if last is None:
        return None
    try:
        meta = await log.meta(key)
        entries = await log.read(key, 0, 0)
        stored = StoredReply.from_entries(key, entries)
        token = meta.get("token")
        if token:
            prefill = stored.gaps(token.get("reply") or {})
            # No caller reads this stream: its outcome is the followers' to read, so the
            # client's raise_for_outcome (meant for a caller's own loop) is not asked.
            stream = client.chat.resume(token, raise_for_outcome=False)
        else:  # nothing was stored yet: the request is simply sent again
            prefill = []
            stream = _send_again(client, key, dict(meta.get("base") or {}))
    except Exception as exc:  # a token this client cannot resume: the producer stays lost
        # The error may quote the stored token (written by whoever can write to the store)
        # over several lines: one line, cut, like every other relay log line.
        logger.warning(
            "relay: cannot take %s over: %s: %s", show_key(key), type(exc).__name__,
            one_line(str(exc)),
        )
        with anyio.CancelScope(shield=True):
            await log.release(key, owner)
        return None
    except BaseException:
        with anyio.CancelScope(shield=True):
            await log.release(key, owner)
        raise
    logger.warning("relay: producer of %s lost; taking over after entry %d", show_key(key), last)
    recorded = RecordedStream.adopt(stream, Recorder(
        stream, log, key=key, owner=owner, first_entry=last,
        transform=stored.filter, prefill=prefill, release_on_cancel=True, only_consumer=True,
    ))

    async def run() -> None:
        try:
            async with recorded:
                async for _ in recorded:
                    if recorded.log_error is not None:
                        break
        except Exception as exc:  # the task must never raise; followers see the lease lapse
            logger.warning(
                "relay: takeover of %s failed: %s: %s", show_key(key), type(exc).__name__,
                one_line(str(exc)),
            )

    return background(run)
