"""The ``fluxstream`` command line: ``demo``, ``chat``, ``serve``, ``capture``, ``replay``.

Errors are one clear line on stderr, never a traceback. Exit codes tell the outcome apart so
scripts can act on them:

====  ==============================================================
0     the reply ended well (``done`` or ``finished``); ``serve`` stopped by Ctrl-C
1     failure: an error payload, an HTTP error, a connection failure
2     bad usage (wrong arguments, unreadable file)
3     the reply was ``truncated``
4     cancelled (Ctrl-C)
====  ==============================================================

The arguments live in :mod:`.args`, what is printed (and how control characters from a
server are kept off the terminal) in :mod:`.render`, capture files in :mod:`.capture`, the
demo's transport and tallies in :mod:`.demo`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import httpx

from .. import apis
from .._client import AsyncClient, checked_headers, keyless, request_for
from .._core.headers import CREDENTIAL_NAME
from .._core.think_tags import ThinkTags
from .._endpoints import api_client
from .._events import Handoff
from .._json_paths import PathTracker
from .._reply import Outcome
from .._retry import ResumePolicy
from .._stream import ReplyStream
from .._upstream import Upstream
from ..apis import Api
from ..errors import FluxstreamError, MissingAPIKeyError
from .args import build_parser
from .capture import (
    Recording,
    format_census,
    load_capture,
    record_response,
    replay_capture,
    request_fields,
)
from .render import FORMAT_NAMES, LivePrinter, Output, json_safe, summary

if TYPE_CHECKING:  # pragma: no cover - imported where used (demo imports httpx's transport)
    from .demo import LogTally

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TRUNCATED, EXIT_CANCELLED = 0, 1, 2, 3, 4
#: The environment variable the client itself reads its root URL from (see :func:`_client`).
_CLIENT_BASE_URL_VARIABLE = "OPENAI_BASE_URL"


def _exit_code(outcome: Outcome | None) -> int:
    if outcome in (Outcome.DONE, Outcome.FINISHED):
        return EXIT_OK
    if outcome is Outcome.TRUNCATED:
        return EXIT_TRUNCATED
    if outcome is Outcome.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_FAILED


class _Session:
    """What a command has under way, so a Ctrl-C can still report (or save) what arrived."""

    def __init__(self, out: Output, err: Output) -> None:
        self.out = out
        #: Messages: always shown with control characters visible (they quote servers).
        self.err = err
        self.stream: ReplyStream | None = None
        self.printer: LivePrinter | None = None
        self.recording: Recording | None = None


# ---------------------------------------------------------------------------- commands


def _tools_for(api: Api, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Chat-shaped function tools in the shape of ``api``."""
    if tools is None:
        return None
    return api.function_tools([t["function"] for t in tools])


def _open_stream(
    client: AsyncClient, api: Api, model: str, messages: list[Any], headers: dict[str, str],
    tools: list[dict[str, Any]] | None, include_usage: bool, fields: dict[str, Any],
    resume: ResumePolicy | None = None, fallbacks: Sequence[Upstream] = (),
    json_paths: bool = False,
) -> ReplyStream:
    """The stream of one request to ``api`` (``messages`` is the Responses ``input`` there;
    an API that requires ``max_tokens`` gets it when not given), going on on ``fallbacks``
    when the endpoint fails."""
    arguments = api.prompt_arguments(model, messages, fields, include_usage=include_usage)
    endpoint = getattr(client, api.endpoint)
    stream: ReplyStream = endpoint.stream(
        tools=tools, extra_headers=headers, resume=resume, fallbacks=fallbacks or None,
        json_paths=json_paths, **arguments,
    )
    return stream


def _path_reader(
    api: Api, fields: dict[str, Any], json_paths: bool
) -> tuple[bool, PathTracker | None]:
    """How ``--json-paths`` gets its path events: from the stream (``json_paths=True``), or,
    for a reply whose text is JSON because the request's own fields say so (the stream has
    no type to know it by), from a tracker that reads the text and the tool calls alike."""
    if json_paths and api.asks_for_json(fields):
        return False, PathTracker(content=True)
    return json_paths, None


#: What the summary says the stream survived, from the stream and the handoffs printed.
Survived = Callable[[ReplyStream, Sequence[Handoff]], str]


async def _stream_to_terminal(
    client: AsyncClient, session: _Session, model: str, messages: list[Any],
    headers: dict[str, str], tools: list[dict[str, Any]] | None,
    survived: Survived | None = None, *, include_usage: bool = True,
    fields: dict[str, Any] | None = None, api: Api,
    resume: ResumePolicy | None = None, fallbacks: Sequence[Upstream] = (),
    log: LogTally | None = None, json_paths: bool = False,
) -> int:
    """Stream the reply to the terminal; ``log``: say each resume and warning as it happens,
    on a line of its own between the reply's text (``chat``); ``json_paths``: each completed
    JSON path of a tool call's arguments or a structured reply too."""
    fields = dict(fields or {})
    n = fields.get("n")
    json_paths, tracker = _path_reader(api, fields, json_paths)
    stream = _open_stream(client, api, model, messages, headers, tools, include_usage, fields,
                          resume, fallbacks, json_paths)
    printer = LivePrinter(session.out, choices=n if type(n) is int else 1, notes=session.err)
    session.stream, session.printer = stream, printer
    if log is not None:
        log.notes = printer.note
    async with stream:
        async for event in stream:
            if tracker is None:
                printer.event(event)
            else:
                for each in tracker.feed([event]):
                    printer.event(each)
    printer.close()
    said = survived(stream, printer.handoffs) if survived else None
    summary(stream.reply, stream, session.out, said)
    return _exit_code(stream.reply.outcome)


_DEMO_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    }}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"timezone": {"type": "string"}},
    }}},
]
#: What the demo's server does to the stream unless told otherwise: ``: ping`` heartbeats
#: between events, every write at most 24 bytes (so reads split events, even characters), and
#: the connection dropped once in mid-answer (``fail-first=1``: only the first attempt), which
#: the client resumes with ``Last-Event-ID``. The reply must still arrive exact.
DEMO_PROFILE = "heartbeats"
DEMO_FAULTS = ("write-size=24", "write-pause=0.001", "drop-after-events=12", "fail-first=1")
#: How the demo's server numbers events for an API whose own stream has no ids, so that the
#: client can resume by ``Last-Event-ID`` (OpenAI's Responses events carry none).
DEMO_IDS = "sse-ids"


async def _demo(args: argparse.Namespace, session: _Session) -> int:
    from ..server import serve
    from .demo import (
        HANDOFF_DROP,
        LogTally,
        ReadCountingTransport,
        fallback_api,
        fallback_upstream,
        survived,
    )

    headers = _headers(args.header)
    api = apis.get(args.format)
    handoff = args.handoff
    profile = DEMO_PROFILE
    # An API resumed by a prefill needs no ids, but a tool call cannot be continued so.
    if not api.event_ids and (not api.prefill_resume or args.tools):
        profile += f",{DEMO_IDS}"
    profile = args.profile or ("" if args.no_faults else profile)
    if profile:
        headers["X-Fluxstream-Profile"] = profile
    defaults: tuple[str, ...] = DEMO_FAULTS
    if handoff:
        # The drop is the primary server's own (``HANDOFF_DROP``): these headers reach the
        # fallback too, which must serve the rest cleanly.
        defaults = tuple(f for f in DEMO_FAULTS if f.startswith(("write-size=", "write-pause=")))
    elif api.prefill_resume:
        # Where the text does not end in whitespace, for an API resumed by a prefill.
        # Anthropic (and the embedded server) refuse a prefill ending in whitespace, but the
        # client sends it trimmed (``StreamParser.begin_continuation``), so the shared drop point
        # would work too: this one is kept only so that each API's demo shows what it showed.
        defaults = tuple(
            "drop-after-events=14" if f.startswith("drop-after-events=") else f
            for f in DEMO_FAULTS
        )
    faults = list(args.fault or ([] if args.no_faults else defaults))
    if args.pace > 0 and not any(f.startswith("drip=") for f in faults):
        faults.append(f"drip={args.pace}")  # token by token, at a pace a person can watch
    if faults:
        headers["X-Fluxstream-Fault"] = ",".join(faults)
    resume = None
    if handoff:
        # The primary's own resume would mend the drop on the same server (the plain demo
        # shows that); off here, so the reply goes on on the fallback.
        resume = ResumePolicy(last_event_id=False, continuation=False, starting_after=False)
    elif api.prefill_resume:
        resume = ResumePolicy(continuation=True)
        # ``fail-first`` counts a continuation (its body differs) only by an attempt key.
        headers.setdefault("X-Fluxstream-Attempt-Key", f"demo-{uuid.uuid4().hex}")
    transport = ReadCountingTransport()
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            serve(port=0, faults=HANDOFF_DROP if handoff else None)
        )
        fallbacks: list[Upstream] = []
        if handoff:
            second = await stack.enter_async_context(serve(port=0))
            fallback = fallback_api(api, args.fallback_format)
            fallbacks.append(fallback_upstream(second.base_url, fallback))
            session.out.write(
                f"fluxstream demo: embedded server at {server.base_url} ({api.name}, drops"
                f" mid-reply), its fallback at {second.base_url} ({fallbacks[0].api})\n\n"
            )
        else:
            session.out.write(f"fluxstream demo: embedded server at {server.base_url}\n\n")
        http = await stack.enter_async_context(httpx.AsyncClient(transport=transport))
        client = await stack.enter_async_context(
            AsyncClient(base_url=server.base_url, api_key="demo-key", http_client=http)
        )
        log = stack.enter_context(LogTally())
        code = await _stream_to_terminal(
            client, session, args.model, [{"role": "user", "content": args.prompt}],
            headers,
            _tools_for(api, _DEMO_TOOLS if args.tools else None),
            lambda stream, handoffs: survived(stream.stats, transport, log, handoffs),
            api=api, resume=resume, fallbacks=fallbacks,
        )
    return code


def _headers(values: Sequence[str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values or ():
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            # Not echoed: a header with its colon forgotten is often "Authorization Bearer
            # <key>", and this message goes to a terminal or a CI log.
            problem = "no ':'" if not sep else "no name before ':'"
            raise ValueError(
                f"--header takes 'Name: value', got a value of {len(value)} characters with"
                f" {problem}"
            )
        headers[name.strip()] = content.strip()
    # Checked here, not only by ``extra_headers=``: ``capture`` builds its request directly.
    return checked_headers(headers, "--header")


def _shown(url: str) -> str:
    """``url`` without a user or password (this goes to a terminal or a CI log)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _client(args: argparse.Namespace, err: Output) -> AsyncClient:
    """The client for ``chat``/``capture``.

    ``--base-url`` is the base URL as the format's own SDK takes it (the client makes it the
    API's root: Anthropic's and Gemini's may name only the host). Without it an API whose
    SDK reads the client's own ``OPENAI_BASE_URL`` (Chat Completions, Responses) takes it
    (the client's default), and one with its own setting takes that, as its SDK does
    (Anthropic: ``ANTHROPIC_BASE_URL`` + ``/v1``, else the public API). That can be another
    server than the ``OPENAI_BASE_URL`` a user set for a local server, so one line on stderr
    says where the request goes, before it is sent.
    """
    api = apis.get(args.format)
    key = args.api_key if args.api_key is not None else os.environ.get(api.api_key_variable)
    if not key and args.api_key is None:
        # A credential given with --header needs no key, as one in ``headers=`` does;
        # otherwise the client is refused, naming the variable to set.
        headers = _headers(getattr(args, "header", None))
        key = "" if any(CREDENTIAL_NAME.search(name) for name in headers) else None
    try:
        if api.base_url_variable == _CLIENT_BASE_URL_VARIABLE:
            return AsyncClient(base_url=args.base_url, api_key=key)
        if args.base_url:
            if key is None:  # never the client's own OPENAI_API_KEY instead
                key = keyless(args.base_url, None, api.api_key_variable)
            return AsyncClient(base_url=args.base_url, api_key=key)
        client = api_client(api, None, key)
    except MissingAPIKeyError as exc:  # said the way this command takes a key
        raise MissingAPIKeyError(exc.variable, exc.where, option="--api-key") from None
    openai_url = os.environ.get(_CLIENT_BASE_URL_VARIABLE)
    if openai_url and openai_url.rstrip("/") != client.base_url:
        why = (f"{api.base_url_variable}, for --format {api.name}"
               if os.environ.get(api.base_url_variable)
               else f"{api.vendor}'s API: {api.base_url_variable} is not set")
        err.write(f"fluxstream: sending to {_shown(client.base_url)} ({why}), not"
                  f" {_CLIENT_BASE_URL_VARIABLE}; --base-url chooses\n")
    return client


async def _chat(args: argparse.Namespace, session: _Session) -> int:
    model, messages, fields = _request(args)
    tools = fields.pop("tools", None)
    if tools is not None and not isinstance(tools, list):
        raise ValueError("tools must be a JSON list")
    from .demo import LogTally

    # A fallback speaks the request's own API unless its spec names another.
    fallbacks = [spec.upstream(args.format) for spec in args.fallback or ()]
    async with _client(args, session.err) as client:
        client.think_tags = args.think_tags
        # Resumes and warnings (retries) on stderr, each one safe line of its own.
        with LogTally() as log:
            return await _stream_to_terminal(
                client, session, model, messages, _headers(args.header), tools,
                include_usage=not args.no_usage, fields=fields, api=apis.get(args.format),
                fallbacks=fallbacks, log=log, json_paths=args.json_paths,
            )


async def _serve(args: argparse.Namespace, session: _Session) -> int:
    """Serve until Ctrl-C (which :func:`main` reports as a normal stop) or SIGTERM (what a
    process manager sends: the same stop, said here). A port it cannot listen on is one line
    naming the address, not the errno alone."""
    from ..server import run_forever

    listening = False

    def ready(url: str) -> None:
        nonlocal listening
        listening = True
        session.out.write(f"fluxstream server listening on {url} (profile {args.profile})\n")
        session.out.flush()

    refused: OSError | None = None
    async with anyio.create_task_group() as tg:
        await tg.start(_stop_on_sigterm, tg.cancel_scope)
        try:
            await run_forever(
                host=args.host, port=args.port, profile=args.profile, api_key=args.api_key,
                ready=ready, faults=args.fault,
            )
        except OSError as exc:
            if listening:
                raise
            refused = exc
            tg.cancel_scope.cancel()
    if refused is not None:
        why = (refused.strerror or str(refused)).lower()
        raise OSError(
            f"cannot listen on {args.host}:{args.port}: {why} (another server there? choose"
            " another with --port)"
        )
    session.out.write("fluxstream server stopped\n")
    return EXIT_OK


async def _stop_on_sigterm(
    scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    """Cancel ``scope`` on SIGTERM; started once the handler is in place, so a SIGTERM sent
    after the server said it listens is always a clean stop (none on Windows: no SIGTERM)."""
    if sys.platform == "win32":  # pragma: no cover - anyio has no signal receiver there
        task_status.started()
        return
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            scope.cancel()
            return


def _request(args: argparse.Namespace) -> tuple[str, list[Any], dict[str, Any]]:
    """Model, messages and the other request fields of ``chat``/``capture`` (``--body``, ``-p``,
    ``--max-tokens``); ``model``/``messages`` given as fields replace the flag and the prompt."""
    fields = request_fields(args.body, args.param, args.max_tokens)
    api = apis.get(args.format)
    if args.max_tokens is not None and api.max_tokens_field != "max_tokens":
        fields[api.max_tokens_field] = fields.pop("max_tokens")  # the API's own name for it
    model = fields.pop("model", args.model)
    messages = fields.pop("messages", [{"role": "user", "content": args.prompt}])
    if not isinstance(model, str) or not isinstance(messages, list):
        raise ValueError("model must be a string and messages a list")
    return model, messages, fields


async def _record(args: argparse.Namespace, session: _Session) -> Recording:
    """Send the request of ``capture`` and record the response into ``session.recording``
    (there as it arrives, so that a Ctrl-C keeps it; see :func:`_save_capture`)."""
    model, messages, fields = _request(args)
    api = apis.get(args.format)
    body = api.streaming_body(model, messages, fields, include_usage=not args.no_usage)
    recording = Recording(body, path=api.path, wire_format=api.name)
    client = _client(args, session.err)
    try:
        request = request_for(client, api, body, _headers(args.header))
        response = await client.http_client.send(request, stream=True)
        session.recording = recording
        await record_response(response, body, recording=recording)
    finally:
        await client.aclose()
    return recording


def _save_capture(args: argparse.Namespace, recording: Recording, session: _Session) -> int:
    """Write the capture file (also after a Ctrl-C: what was read, marked interrupted)."""
    session.recording = None
    record = recording.record()
    Path(args.output).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    reads = [base64.b64decode(r["b64"]) for r in record["reads"]]
    summary_line = f"{len(reads)} reads, {sum(map(len, reads))} bytes, to {args.output}"
    if recording.interrupted:
        session.err.write(f"fluxstream: interrupted; captured {summary_line}\n")
        return EXIT_CANCELLED
    if recording.error is not None:
        error = recording.error
        session.err.write(
            f"fluxstream: the connection broke ({error['type']}: {error['message']}); "
            f"captured {summary_line}\n"
        )
        return EXIT_TRUNCATED
    session.out.write(f"captured {summary_line} (HTTP {record['status']})\n")
    status = recording.status or 0
    return EXIT_OK if 200 <= status < 300 else EXIT_FAILED


def load_fixture(path: str) -> list[bytes]:
    """The reads of a capture file, or a plain ``.sse`` body as one read."""
    return load_capture(path).reads


def _replay(args: argparse.Namespace, session: _Session) -> int:
    """Replay a capture; a stream read in a format most of its frames are not in gets a
    hint on stderr naming the format they are in."""
    out = session.out
    capture = load_capture(args.file)
    fmt = args.format or capture.wire_format or "auto"
    # A non-2xx status raises its typed error.
    tags = ThinkTags() if args.think_tags else None
    reply = replay_capture(capture, read_size=args.read_size, format=fmt, think_tags=tags)
    census = format_census(capture)
    read_as = census.first if fmt == "auto" else fmt
    other = census.other_than(read_as) if read_as else 0
    if args.json:
        dump = reply.model_dump_json(indent=2)
        out.write((dump if out.raw else json_safe(dump)) + "\n")
    else:
        for choice in reply.choices:
            if choice.reasoning:
                out.write(f"[reasoning {choice.index}] {choice.reasoning}\n")
            if choice.text:
                out.write(f"[text {choice.index}] {choice.text}\n")
            if choice.refusal:
                out.write(f"[refusal {choice.index}] {choice.refusal}\n")
            for call in choice.tool_calls:
                out.write(f"[tool call {call.index}] {call.name}({call.arguments})\n")
        summary(reply, None, out, other_format=other)
        error = capture.error
        if capture.interrupted:
            out.write("recorded break: interrupted (Ctrl-C)\n")
        elif error is not None:
            out.write(f"recorded break: {error.get('type')}: {error.get('message')}\n")
    fits = census.fitting(read_as) if read_as else None
    if fits is not None:
        name = FORMAT_NAMES.get(fits, fits)  # "auto" and unknown names as they are
        session.err.write(
            f"fluxstream: most frames were skipped: {census.counts[fits]} of {census.events}"
            f" events are {name} events; try --format {fits}\n"
        )
    return _exit_code(reply.outcome)


# ---------------------------------------------------------------------------- entry point


def _interrupted(args: argparse.Namespace, session: _Session) -> int:
    """Ctrl-C: what each command keeps and says."""
    if args.command == "serve":
        session.out.write("fluxstream server stopped\n")
        return EXIT_OK
    recording = session.recording
    if recording is not None:
        recording.interrupt()
        return _save_capture(args, recording, session)
    stream = session.stream
    if stream is not None:
        if session.printer is not None:
            session.printer.close()
        summary(stream.reply, stream, session.out)
        return _exit_code(stream.reply.outcome)
    session.err.write("fluxstream: interrupted\n")
    return EXIT_CANCELLED


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    session = _Session(Output(sys.stdout, raw=getattr(args, "raw", False)), Output(sys.stderr))
    err = session.err
    try:
        if args.command == "replay":
            return _replay(args, session)
        if args.command == "capture":
            return _save_capture(args, anyio.run(_record, args, session), session)
        runner = {"demo": _demo, "chat": _chat, "serve": _serve}[args.command]
        return int(anyio.run(runner, args, session))
    except KeyboardInterrupt:
        return _interrupted(args, session)
    except MissingAPIKeyError as exc:  # nothing was sent: how the command was run
        err.write(f"fluxstream: {exc}\n")
        return EXIT_USAGE
    except FluxstreamError as exc:
        err.write(f"fluxstream: {type(exc).__name__}: {exc}\n")
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        err.write(f"fluxstream: {exc}\n")
        return EXIT_USAGE
    except Exception as exc:  # an HTTP library's own error (capture): still one line
        err.write(f"fluxstream: {type(exc).__name__}: {exc}\n")
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
