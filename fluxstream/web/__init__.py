"""Stream a reply to a browser: an ASGI response for Starlette, FastAPI or any ASGI server.

::

    from fluxstream.web import EventStreamResponse

    @app.get("/chat")
    async def chat(prompt: str):
        return EventStreamResponse(client.chat.stream(model=..., messages=[...]))

Every event goes out as a named server-sent event whose ``id:`` the reply can be resumed
from; text carries its ``key`` and ``offset`` (``buf[offset:offset + len(text)] = text``);
heartbeats keep proxies from cutting an idle connection; the page leaving cancels the
upstream request at once; a page that stops reading is disconnected after ``send_timeout``.
:meth:`EventStreamResponse.follow` serves a reply recorded in a
:class:`~fluxstream.relay.ReplyLog`, and a reconnecting ``EventSource`` (``Last-Event-ID``)
continues exactly where it stopped. A ``Last-Event-ID`` is untrusted: malformed, another
reply's, or past the end, it is a 4xx with a JSON body, never another reply's text or text
twice. The protocol in full: ``docs/recipes/browser.md``.

The seam for another wire protocol is :class:`Encoding` (with :class:`EventEncoder`, one per
response): the response takes ``encoding=``; :class:`SSE` is the built-in one.
"""

from __future__ import annotations

from ._encoding import SSE, Encoding, EventEncoder
from ._ids import EventIds
from ._response import EventStreamResponse

__all__ = ["SSE", "Encoding", "EventEncoder", "EventIds", "EventStreamResponse"]
