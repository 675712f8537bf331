"""A relayed chat page: reload-safe, reconnect-safe, with a Stop button that stops the model.

A small Starlette app (``pip install starlette uvicorn``; an example dependency, not one of
fluxstream's). A reply is produced once, in a background task, into a reply log; the page
follows it with an ``EventSource`` whose ``id:`` fields are follow positions, so a dropped
connection, a page reload, or a reconnect that a load balancer sends to another worker
resumes exactly where it stopped, and the page renders every character once by
``(key, offset)``. Stop calls ``log.cancel(key)``, which closes the upstream request from
whichever worker produces the reply.

Run it for real (one worker; for several, set ``REDIS_URL`` so they share a Redis log)::

    python examples/relay_app.py --serve          # http://127.0.0.1:8000, embedded upstream

Without ``--serve`` it checks itself and exits: it starts a reply through the app, cuts the
page's event stream after a few events, reconnects with ``Last-Event-ID`` and prints the
rendered text, which must equal the reply.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import fluxstream
from fluxstream.errors import RelayError, RelayKeyError, RelayPositionError
from fluxstream.relay import MemoryReplyLog, RecordedStream, ReplyLog, to_sse
from fluxstream.server import ServerThread, expected_reply

PAGE = """<!doctype html><meta charset="utf-8"><title>fluxstream relay</title>
<style>body{font:16px system-ui;max-width:40em;margin:2em auto}#out{white-space:pre-wrap;
border:1px solid #ccc;padding:1em;min-height:4em}</style>
<form id="ask"><input id="prompt" value="Tell me about relays" size="40">
<button>Ask</button> <button type="button" id="stop">Stop</button></form>
<p id="status"></p><div id="out"></div>
<script>
// Test hooks in the query string (used by the headless-browser test): ?auto=PROMPT asks at
// once, cut=N makes the server end each event stream after N events (a dropped connection),
// reload=N reloads the page once after N characters, stop=N presses Stop after N characters.
const params = new URLSearchParams(location.search);
let source = null, text = [];
function render(){
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
function follow(key){
  if (source) source.close();
  text = []; render();
  const cut = params.get('cut') ? '?cut=' + params.get('cut') : '';
  source = new EventSource('/replies/' + encodeURIComponent(key) + '/events' + cut);
  source.addEventListener('text', e => {            // render by offset: never twice
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
async function ask(prompt){
  const r = await fetch('/replies', {method: 'POST', body: JSON.stringify({prompt})});
  const {key} = await r.json();
  location.hash = key;                               // a reload follows the same reply
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


#: The most tokens one request from the page may ask for.
MAX_TOKENS = 4096

def make_app(log: ReplyLog, base_url: str) -> Starlette:
    """The app: ``POST /replies``, ``GET /replies/{key}/events``, ``POST .../stop``."""
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with fluxstream.AsyncClient(base_url) as client:
            async with anyio.create_task_group() as tg:
                state["client"], state["tg"] = client, tg
                yield
                tg.cancel_scope.cancel()

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def start(request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
            max_tokens = int(body.get("max_tokens", 200))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return JSONResponse({"error": "expected {prompt, max_tokens}"}, status_code=400)
        if not 1 <= max_tokens <= MAX_TOKENS:  # the page's input is not to be trusted
            return JSONResponse({"error": f"max_tokens: 1..{MAX_TOKENS}"}, status_code=400)
        key = uuid.uuid4().hex
        stream = state["client"].chat.stream(
            model="m", messages=[{"role": "user", "content": str(body.get("prompt", "hi"))}],
            content_key=key, max_tokens=max_tokens,
        )
        recorded = log.record(stream)
        await recorded.start()  # the key exists now: the page may follow it at once
        state["tg"].start_soon(drain, recorded)
        return JSONResponse({"key": key})

    async def drain(recorded: RecordedStream) -> None:
        async with recorded:
            async for _ in recorded:
                pass

    async def events(request: Request) -> Response:
        key = request.path_params["key"]
        last_id = request.headers.get("last-event-id")
        try:
            followed = log.follow(key, last_event_id=last_id)
            first = await followed.__anext__()  # errors now, as a status, not mid-stream
        except StopAsyncIteration:
            return Response(status_code=204)  # nothing after that id: tell EventSource to stop
        except RelayKeyError:
            return JSONResponse({"error": "unknown reply"}, status_code=404)
        except RelayPositionError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

        cut = int(request.query_params.get("cut", 0))  # test hook: drop after N events

        async def rest() -> AsyncIterator[Any]:
            yield first
            sent = 1
            try:
                async for item in followed:
                    if cut and sent >= cut:
                        break  # the connection "drops": the browser reconnects
                    yield item
                    sent += 1
            except RelayError:
                return  # the browser reconnects with Last-Event-ID

        return StreamingResponse(
            to_sse(rest(), retry=500), media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def stop(request: Request) -> Response:
        try:
            outcome = await log.cancel(request.path_params["key"])
        except RelayKeyError:
            return JSONResponse({"error": "unknown reply"}, status_code=404)
        return JSONResponse({"outcome": outcome.value if outcome else None})

    return Starlette(routes=[
        Route("/", page),
        Route("/replies", start, methods=["POST"]),
        Route("/replies/{key}/events", events),
        Route("/replies/{key}/stop", stop, methods=["POST"]),
    ], lifespan=lifespan)


def make_log() -> ReplyLog:
    url = os.environ.get("REDIS_URL")
    if url:
        from fluxstream.relay import RedisReplyLog

        return RedisReplyLog(url)
    return MemoryReplyLog()


async def self_check(base_url: str) -> str:
    """Ask, follow the page's event stream, cut it, reconnect with Last-Event-ID, render."""
    import httpx

    log = MemoryReplyLog()
    app = make_app(log, base_url)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay") as http:
            key = (await http.post("/replies", json={"prompt": "relay"})).json()["key"]
            rendered: list[str] = []
            last_id: str | None = None
            for cut in (3, 7, 10**9):  # events per connection before the "network" cuts it
                headers = {"last-event-id": last_id} if last_id else {}
                response = await http.get(f"/replies/{key}/events", headers=headers)
                if response.status_code == 204:
                    break
                decoder = fluxstream.SSEDecoder()
                for sse in decoder.feed(response.content)[:cut]:
                    last_id = sse.id
                    data = json.loads(sse.data)
                    if sse.event == "text":
                        assert data["offset"] == len(rendered), "a character twice"
                        rendered.extend(data["text"])
    return "".join(rendered)


def main() -> None:
    with ServerThread(profile="openai", faults="drip=0.002") as upstream:
        if "--serve" in sys.argv:
            import uvicorn

            port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 8000
            uvicorn.run(make_app(make_log(), upstream.base_url), host="127.0.0.1", port=port,
                        log_level="warning")
            return
        text = anyio.run(self_check, upstream.base_url)
    request = {"model": "m", "messages": [{"role": "user", "content": "relay"}],
               "max_tokens": 200, "stream": True, "stream_options": {"include_usage": True}}
    print(text)
    assert text == expected_reply(request).text, "the rendered text is not the reply"


if __name__ == "__main__":
    main()
