"""A relayed chat page: reload-safe, reconnect-safe, with a Stop button that stops the model.

A small Starlette app (``pip install 'fluxstream[examples]'`` brings Starlette and uvicorn;
example dependencies, not fluxstream's). A reply is produced once, in a background task, into a
reply log; the page follows it with an ``EventSource`` whose ``id:`` fields are follow
positions, so a dropped connection, a page reload, or a reconnect that a load balancer sends to
another worker resumes exactly where it stopped, and the page renders every character once by
``(key, offset)``. Stop calls ``log.cancel(key)``, which closes the upstream request from
whichever worker produces the reply.

Run it for real (one worker; for several, set ``REDIS_URL`` so they share a Redis log)::

    python examples/relay_app.py --serve          # http://127.0.0.1:8000, embedded upstream
    REDIS_URL=redis://127.0.0.1:6379/0 python examples/relay_app.py --serve

With ``REDIS_URL`` set the app checks Redis at start-up and exits with one line when it cannot
reach it; a Redis that goes away later gets each request a 503 with a short JSON body.

What to keep when you copy it: request bodies are bounded (:data:`MAX_BODY_BYTES`, a 413 past
it); every input from the page is checked (a 400, never a 500); reply keys stay out of
uvicorn's access log (:class:`HideReplyKeys`); and the place where authentication goes is
marked (``authorized`` in :func:`make_app`; off unless a token is configured, with
``RELAY_AUTH_TOKEN`` for ``--serve``).

Without ``--serve`` it checks itself and exits: it starts a reply through the app, cuts the
page's event stream after a few events, reconnects with ``Last-Event-ID`` and prints the
rendered text, which must equal the reply.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel

try:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ModuleNotFoundError as exc:  # one line saying what to install, not a traceback
    sys.exit(f"this example needs Starlette ({exc.name} is not installed):"
             " pip install 'fluxstream[examples]'")

import fluxstream
from fluxstream.errors import (
    RelayError,
    RelayKeyError,
    RelayPositionError,
    RelayUnavailableError,
)
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
  if (!r.ok) {                                       // 4xx: bad input; 503: the log is away
    document.getElementById('status').textContent = 'error: ' + (await r.json()).error;
    return;
  }
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
#: The largest request body read: a prompt and its options. A larger one is a 413, judged
#: by ``Content-Length`` and again as it arrives (a chunked body declares no length).
MAX_BODY_BYTES = 64 * 1024
#: ``?cut=N`` (a test hook: the page's event stream ends after N events) takes a small count.
_CUT = re.compile(r"[0-9]{1,6}")
#: Seconds a client is told to wait (``Retry-After``) while the reply log is unavailable.
RETRY_AFTER = 5

Handler = Callable[[Request], Awaitable[Response]]


class StartupError(RuntimeError):
    """The app cannot serve: its reply log's backend is unreachable (one line, for people)."""


class HideReplyKeys(logging.Filter):
    """Replace reply keys in uvicorn's access log with ``<key>``.

    A reply key is a capability: whoever has it can follow the reply or stop it. The page's
    ``EventSource`` can send neither headers nor a body, so the key has to be in the URL, and
    uvicorn's access log writes the URL. (Another server logs under other names: filter its
    access logger the same way, or turn its access log off.)
    """

    _KEY = re.compile(r"(/replies/)[^/?\s]+")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                self._KEY.sub(r"\1<key>", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        return True


async def check_log(log: ReplyLog) -> None:
    """Fail at start-up, in one line, when the log's Redis is unreachable (rather than
    answering ``POST /replies`` and failing every follower after it)."""
    redis = getattr(log, "redis", None)  # RedisReplyLog's client; a memory log needs nothing
    if redis is None:
        return
    try:
        with anyio.fail_after(5):
            await redis.ping()
    except Exception as exc:
        why = (str(exc).splitlines() or [""])[0] or "no answer within 5 s"
        raise StartupError(
            f"relay_app: cannot reach Redis ({type(exc).__name__}: {why}); "
            "start redis-server or unset REDIS_URL"
        ) from None


async def read_body(request: Request) -> bytes | None:
    """The request body, or ``None`` when it is over :data:`MAX_BODY_BYTES` (never read
    whole: a client may send gigabytes)."""
    declared = request.headers.get("content-length", "")
    if len(declared) > 9 or (declared.isdecimal() and int(declared) > MAX_BODY_BYTES):
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def make_app(log: ReplyLog, base_url: str, *, auth_token: str | None = None) -> Starlette:
    """The app: ``POST /replies``, ``GET /replies/{key}/events``, ``POST .../stop``.

    ``auth_token``: when given, every reply route needs it (see ``authorized`` below).
    """
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await check_log(log)
        access = logging.getLogger("uvicorn.access")
        hide = HideReplyKeys()
        access.addFilter(hide)
        try:
            async with fluxstream.AsyncClient(base_url) as client:
                async with anyio.create_task_group() as tg:
                    state["client"], state["tg"] = client, tg
                    yield
                    tg.cancel_scope.cancel()
        finally:
            access.removeFilter(hide)

    # ---- AUTHENTICATION GOES HERE --------------------------------------------------------
    # Off unless a token is configured. Replace this check with your own (your login's
    # session cookie, your API's bearer tokens), and check that the reply belongs to the
    # user too: a reply key lets whoever holds it follow and stop that reply. A browser's
    # EventSource cannot send headers, so a page authenticates with a cookie (same origin:
    # the browser sends it; set it HttpOnly, SameSite=Strict); API clients send a bearer.
    def authorized(request: Request) -> bool:
        if auth_token is None:
            return True
        header = request.headers.get("authorization", "")
        given = header[7:] if header.startswith("Bearer ") else (
            request.cookies.get("relay_token", ""))
        return hmac.compare_digest(given.encode(), auth_token.encode())

    def guarded(handler: Handler) -> Handler:
        async def checked(request: Request) -> Response:
            if not authorized(request):
                return JSONResponse({"error": "unauthorized"}, status_code=401,
                                    headers={"www-authenticate": "Bearer"})
            return await handler(request)

        return checked
    # ---------------------------------------------------------------------------------------

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def start(request: Request) -> Response:
        raw = await read_body(request)
        if raw is None:
            return JSONResponse({"error": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
        try:
            body = json.loads(raw or b"{}")
            max_tokens = int(body.get("max_tokens", 200))
        except (ValueError, TypeError, AttributeError, RecursionError, OverflowError):
            return JSONResponse({"error": "expected {prompt, max_tokens}"}, status_code=400)
        if not 1 <= max_tokens <= MAX_TOKENS:  # the page's input is not to be trusted
            return JSONResponse({"error": f"max_tokens: 1..{MAX_TOKENS}"}, status_code=400)
        key = uuid.uuid4().hex
        stream = state["client"].chat.stream(
            model="m", messages=[{"role": "user", "content": str(body.get("prompt", "hi"))}],
            content_key=key, max_tokens=max_tokens,
        )
        # Only drained below: if another worker takes the reply over, this one stops the model.
        recorded = log.record(stream, only_consumer=True)
        await recorded.start()  # the key exists now: the page may follow it at once
        if recorded.log_error is not None:  # not stored: nobody could follow it
            await recorded.aclose()
            raise RelayUnavailableError("the reply log is unavailable") from recorded.log_error
        state["tg"].start_soon(drain, recorded)
        return JSONResponse({"key": key})

    async def drain(recorded: RecordedStream) -> None:
        async with recorded:
            async for _ in recorded:
                pass

    async def events(request: Request) -> Response:
        key = request.path_params["key"]
        last_id = request.headers.get("last-event-id")
        cut_text = request.query_params.get("cut", "0")  # test hook: drop after N events
        if not _CUT.fullmatch(cut_text):
            return JSONResponse({"error": "cut: a count of events (0 to 999999)"},
                                status_code=400)
        cut = int(cut_text)
        try:
            followed = log.follow(key, last_event_id=last_id)
            first = await followed.__anext__()  # errors now, as a status, not mid-stream
        except StopAsyncIteration:
            return Response(status_code=204)  # nothing after that id: tell EventSource to stop
        except RelayKeyError:
            return JSONResponse({"error": "unknown reply"}, status_code=404)
        except RelayPositionError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

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

    async def unavailable(request: Request, exc: Exception) -> Response:
        """Redis went away: a short answer (``Retry-After`` says when to try again), not a
        500 with a traceback."""
        return JSONResponse({"error": "the reply log is unavailable; try again shortly"},
                            status_code=503, headers={"retry-after": str(RETRY_AFTER)})

    return Starlette(routes=[
        Route("/", page),
        Route("/replies", guarded(start), methods=["POST"]),
        Route("/replies/{key}/events", guarded(events)),
        Route("/replies/{key}/stop", guarded(stop), methods=["POST"]),
    ], lifespan=lifespan, exception_handlers={RelayUnavailableError: unavailable})


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


async def check_redis_url(url: str) -> None:
    """:func:`check_log` with a log of its own, closed on this event loop (a Redis client
    is bound to the loop it first connected on; the app's runs on uvicorn's)."""
    from fluxstream.relay import RedisReplyLog

    probe = RedisReplyLog(url)
    try:
        await check_log(probe)
    finally:
        await probe.aclose()


def main() -> None:
    if "--serve" in sys.argv and os.environ.get("REDIS_URL"):
        try:
            anyio.run(check_redis_url, os.environ["REDIS_URL"])
        except StartupError as exc:
            sys.exit(str(exc))  # one line, exit status 1
    with ServerThread(profile="openai", faults="drip=0.002") as upstream:
        if "--serve" in sys.argv:
            try:
                import uvicorn
            except ModuleNotFoundError:
                sys.exit("--serve needs uvicorn: pip install 'fluxstream[examples]'")

            port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 8000
            app = make_app(make_log(), upstream.base_url,
                           auth_token=os.environ.get("RELAY_AUTH_TOKEN") or None)
            uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
            return
        text = anyio.run(self_check, upstream.base_url)
    request = {"model": "m", "messages": [{"role": "user", "content": "relay"}],
               "max_tokens": 200, "stream": True, "stream_options": {"include_usage": True}}
    print(text)
    assert text == expected_reply(request).text, "the rendered text is not the reply"


if __name__ == "__main__":
    main()
