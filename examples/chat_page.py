"""A chat page that survives: reload, Stop, a dead worker, a proxy that cuts idle connections.

A one-file FastAPI app (``pip install fastapi uvicorn``; example dependencies, not
fluxstream's) and a page with no build step. ``POST /replies`` starts a reply, recorded into a
reply log by a background task; the page follows it with an ``EventSource`` on
``GET /replies/{key}/events``, which is :meth:`fluxstream.web.EventStreamResponse.follow`:

* every event has an ``id:``; a dropped connection reconnects with ``Last-Event-ID`` and
  continues exactly after it, on this worker or any other sharing the log;
* text carries its offset, and the page writes ``buf[offset:] = text``, so nothing shows twice,
  and a reload follows the reply again from the start (the key is in the page's URL);
* heartbeats (SSE comments) keep a proxy or load balancer from cutting the connection while
  the model thinks;
* Stop is ``POST /replies/{key}/stop``: :meth:`~fluxstream.relay.ReplyLog.cancel` stops the
  model from whichever worker produces the reply;
* a worker that dies mid-reply is taken over: the next follower (``takeover=client``) resumes
  the upstream request from the reply's resume token, once the dead worker's lease lapsed.

The log is in memory by default (one worker); with ``REDIS_URL`` set it is Redis, shared by
every worker::

    python examples/chat_page.py --serve                 # http://127.0.0.1:8000
    REDIS_URL=redis://127.0.0.1:6379/0 python examples/chat_page.py --serve --port 8001

The upstream is the embedded server (``fluxstream.server``), started here unless
``--upstream URL`` names one (several workers share one). Without ``--serve`` the file checks
itself and exits: it asks, reads part of the event stream, reconnects with ``Last-Event-ID``
and prints the text, which must equal the reply.

What to keep when you copy it: the prompt is bounded (:class:`Ask`); reply keys are
capabilities (whoever has one can follow and stop the reply), so the access log is off (it
writes URLs); and the place where authentication goes is marked.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import anyio
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

import fluxstream
from fluxstream.errors import RelayKeyError
from fluxstream.relay import MemoryReplyLog, RecordedStream, ReplyLog
from fluxstream.server import ServerThread, expected_reply
from fluxstream.web import SSE, EventStreamResponse

PAGE = """<!doctype html><meta charset="utf-8"><title>fluxstream chat</title>
<style>body{font:16px system-ui;max-width:40em;margin:2em auto}#out{white-space:pre-wrap;
border:1px solid #ccc;padding:1em;min-height:4em}</style>
<form id="ask"><input id="prompt" value="Tell me about streams" size="40">
<button>Ask</button> <button type="button" id="stop">Stop</button></form>
<p id="status"></p><div id="out"></div>
<script>
// Test hooks in the query string (the headless-browser test uses them): ?auto=PROMPT asks at
// once; reload=N reloads the page once after N characters; stop=N presses Stop after N.
const params = new URLSearchParams(location.search);
let source = null, text = [];
function render() {
  document.getElementById('out').textContent = text.join('');
  const shown = text.filter(c => c !== undefined).length;
  if (params.get('reload') && !sessionStorage.getItem('reloaded') &&
      shown >= +params.get('reload')) {
    sessionStorage.setItem('reloaded', '1'); location.reload();
  }
  if (params.get('stop') && !window.stopped && shown >= +params.get('stop')) {
    window.stopped = true; document.getElementById('stop').click();
  }
}
function follow(key) {
  if (source) source.close();
  text = []; render();
  source = new EventSource('/replies/' + encodeURIComponent(key) + '/events');
  source.addEventListener('text', e => {     // buf[offset:] = text: never a character twice
    const d = JSON.parse(e.data);
    if (d.choice !== 0) return;
    const chars = [...d.text];
    for (let i = 0; i < chars.length; i++) {
      if (text[d.offset + i] !== undefined) document.title = 'TWICE';
      text[d.offset + i] = chars[i];
    }
    render();
  });
  source.addEventListener('end', e => {
    const outcome = JSON.parse(e.data).outcome;
    document.getElementById('status').textContent = 'ended: ' + outcome;
    if (document.title !== 'TWICE') document.title = 'ended: ' + outcome;
    source.close();
  });
}
async function ask(prompt) {
  const r = await fetch('/replies', {method: 'POST', headers: {'content-type':
    'application/json'}, body: JSON.stringify({prompt})});
  if (!r.ok) { document.getElementById('status').textContent = 'error ' + r.status; return; }
  const {key} = await r.json();
  location.hash = key;                      // a reload follows the same reply
  follow(key);
}
document.getElementById('ask').onsubmit = ev => {
  ev.preventDefault(); ask(document.getElementById('prompt').value);
};
document.getElementById('stop').onclick = () =>
  fetch('/replies/' + encodeURIComponent(location.hash.slice(1)) + '/stop', {method: 'POST'});
if (location.hash.length > 1) follow(location.hash.slice(1));
else if (params.get('auto')) ask(params.get('auto'));
</script>"""


class Ask(BaseModel):
    """What the page sends: bounded, since the page's input is not to be trusted."""

    prompt: str = Field(max_length=4000)
    max_tokens: int = Field(200, ge=1, le=4096)


def make_app(log: ReplyLog, base_url: str, *, heartbeat: float = 15.0) -> FastAPI:
    """The app. ``heartbeat``: seconds of quiet after which a comment is sent (keep it below
    the idle timeout of every proxy and load balancer in front)."""
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with fluxstream.AsyncClient(base_url) as client:
            async with anyio.create_task_group() as tasks:  # the producers of this worker
                state["client"], state["tasks"] = client, tasks
                yield
                tasks.cancel_scope.cancel()

    app = FastAPI(lifespan=lifespan)

    # ---- AUTHENTICATION GOES HERE: check your user's session on every route below, and that
    # the reply belongs to them (an EventSource sends cookies, not headers).

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE

    @app.post("/replies")
    async def start(ask: Ask) -> dict[str, str]:
        key = uuid.uuid4().hex
        stream = state["client"].chat.stream(
            model="m", messages=[{"role": "user", "content": ask.prompt}],
            max_tokens=ask.max_tokens, content_key=key,
        )
        # Recorded by this worker, followed from any: only the log reads it, so a worker
        # that lost the reply to a takeover stops its model.
        recorded = log.record(stream, only_consumer=True)
        await recorded.start()  # the key exists now: the page may follow it at once
        state["tasks"].start_soon(drain, recorded)
        return {"key": key}

    async def drain(recorded: RecordedStream) -> None:
        async with recorded:
            async for _ in recorded:
                pass

    @app.get("/replies/{key}/events", response_model=None)
    async def events(key: str) -> EventStreamResponse:
        return EventStreamResponse.follow(
            log, key, takeover=state["client"], heartbeat=heartbeat,
            encoding=SSE(retry=500),  # reconnect after half a second
        )

    @app.post("/replies/{key}/stop")
    async def stop(key: str) -> dict[str, str | None]:
        try:
            outcome = await log.cancel(key)
        except RelayKeyError:
            raise HTTPException(404, "unknown reply") from None
        return {"outcome": outcome.value if outcome else None}

    return app


def make_log() -> ReplyLog:
    url = os.environ.get("REDIS_URL")
    if url:
        from fluxstream.relay import RedisReplyLog

        return RedisReplyLog(url)
    return MemoryReplyLog()


async def self_check(base_url: str) -> str:
    """Ask, read the first events, reconnect with the last id, render by offset."""
    import httpx

    app = make_app(MemoryReplyLog(), base_url)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://chat") as http:
            key = (await http.post("/replies", json={"prompt": "chat"})).json()["key"]
            shown: list[str] = []
            headers: dict[str, str] = {}
            for keep in (5, None):  # the first connection "drops" after five events
                response = await http.get(f"/replies/{key}/events", headers=headers)
                for sse in fluxstream.SSEDecoder().feed(response.content)[:keep]:
                    headers = {"last-event-id": sse.id or ""}
                    if sse.event == "text":
                        delta = json.loads(sse.data)
                        shown[delta["offset"]:] = delta["text"]  # as the page does
    return "".join(shown)


def main() -> None:
    if "--upstream" in sys.argv:  # several workers share one upstream
        upstream: Any = nullcontext(sys.argv[sys.argv.index("--upstream") + 1])
    else:
        upstream = ServerThread(profile="openai", faults="drip=0.01")
    with upstream as running:
        base_url = running if isinstance(running, str) else running.base_url
        if "--serve" in sys.argv:
            import uvicorn

            port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 8000
            uvicorn.run(make_app(make_log(), base_url), host="127.0.0.1", port=port,
                        log_level="warning", access_log=False)
            return
        text = anyio.run(self_check, base_url)
    print(text)
    request = {"model": "m", "messages": [{"role": "user", "content": "chat"}],
               "max_tokens": 200, "stream": True, "stream_options": {"include_usage": True}}
    assert text == expected_reply(request).text, "the page's text is not the reply"


if __name__ == "__main__":
    main()
