"""What a renderer writing ``buf[offset:]`` shows of a stream: the helper of the failover
tests, which check that a handoff never shows a character twice nor skips one."""

from __future__ import annotations

from typing import Any

import fluxstream

#: The embedded server's profile of a fallback that counts a continuation's ``max_tokens`` as
#: providers count a prefill's (the prefix is input): a client asking for what is left of its
#: cap ends with exactly the uninterrupted reply.
CONTINUES = "prefix-as-input"


async def read_shown(stream: fluxstream.ReplyStream) -> tuple[str, list[Any]]:
    """The text as such a renderer shows it (every text event's offset must be the end of
    what was shown; a ``Reset`` starts it over), and every other event, in order."""
    shown = ""
    others: list[Any] = []
    async with stream:
        async for event in stream:
            if event.type == "text":
                assert event.offset == len(shown), (event.offset, len(shown))
                shown += event.text
            else:
                if event.type == "reset":
                    shown = ""
                others.append(event)
    return shown, others
