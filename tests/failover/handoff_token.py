"""A resume token taken while a fallback serves: the helper of the tests that resume there."""

from __future__ import annotations

from typing import Any

import fluxstream
from fluxstream import Handoff


async def token_past_handoff(stream: fluxstream.ReplyStream) -> dict[str, Any]:
    """Read ``stream`` to its handoff and the first text after it (the fallback serves), then
    leave it, as a worker that stops mid-reply does: its resume token names the fallback."""
    async with stream:
        async for event in stream:
            if isinstance(event, Handoff):
                break
        async for event in stream:
            if event.type == "text":
                break
        return stream.resume_token()
