"""The ``fluxstream`` command line: ``demo``, ``chat``, ``serve``, ``capture``, ``replay``.

Errors are one clear line on stderr, never a traceback. Exit codes tell the outcome apart so
scripts can act on them:

====  ==============================================================
0     the reply ended well (``done`` or ``finished``)
1     failure: an error payload, an HTTP error, a connection failure
2     bad usage (wrong arguments, unreadable file)
3     the reply was ``truncated``
4     cancelled (Ctrl-C)
====  ==============================================================
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import anyio
import httpx

from ._capture import load_capture, record_response, replay_capture, request_fields
from .client import AsyncClient
from .endpoints import anthropic_client
from .errors import FluxstreamError
from .events import Finish, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDone
from .reply import Outcome, Reply
from .retry import ResumePolicy
from .stream import ReplyStream

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TRUNCATED, EXIT_CANCELLED = 0, 1, 2, 3, 4
DEFAULT_PROMPT = "Tell me how fluxstream streams a reply, token by token."
#: Wire formats of ``--format``: the API each one talks to (``client.chat``,
#: ``client.responses``, ``client.messages``) and its path under the base URL.
FORMATS = ("chat_completions", "responses", "anthropic_messages")
_PATHS = {"chat_completions": "chat/completions", "responses": "responses",
          "anthropic_messages": "messages"}
#: ``max_tokens`` is required by Anthropic Messages; what the CLI sends when not given.
DEFAULT_MAX_TOKENS = 1024


def _exit_code(outcome: Outcome | None) -> int:
    if outcome in (Outcome.DONE, Outcome.FINISHED):
        return EXIT_OK
    if outcome is Outcome.TRUNCATED:
        return EXIT_TRUNCATED
    if outcome is Outcome.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_FAILED


class _Session:
    """Holds the live stream so Ctrl-C can still report what arrived."""

    stream: ReplyStream | None = None


# ---------------------------------------------------------------------------- printing


def _print_live(event: object, out: TextIO, state: dict[str, str]) -> None:
    kind = type(event)
    if kind is TextDelta or kind is ReasoningDelta or kind is RefusalDelta:
        channel = {TextDelta: "text", ReasoningDelta: "reasoning", RefusalDelta: "refusal"}[kind]
        if state.get("channel") != channel:
            if state.get("channel"):
                out.write("\n")
            if channel != "text":
                out.write(f"[{channel}] ")
            state["channel"] = channel
        out.write(event.text)  # type: ignore[attr-defined]
        out.flush()
    elif kind is ToolCallDone:
        call = event.call  # type: ignore[attr-defined]
        out.write(f"\n[tool call {call.index}] {call.name}({call.arguments})")
        state["channel"] = "tool"
        out.flush()


def _summary(
    reply: Reply, stream: ReplyStream | None, out: TextIO, survived: str | None = None
) -> None:
    out.write("\n\n")
    out.write(f"outcome:        {reply.outcome.value if reply.outcome else 'unknown'}\n")
    for choice in reply.choices:
        out.write(f"finish reason:  {choice.finish_reason} (choice {choice.index})\n")
    if reply.error is not None:
        out.write(f"error:          {reply.error.message}\n")
    if reply.usage is not None:
        prompt, completion, total = _tokens(reply)
        out.write(f"usage:          prompt {prompt}, completion {completion}, total {total}\n")
    if stream is not None:
        stats = stream.stats
        if stats.time_to_first_token is not None:
            out.write(f"first token:    {stats.time_to_first_token * 1000:.1f} ms\n")
        if stats.duration and stats.time_to_first_token is not None:
            tokens = _tokens(reply)[1]
            span = stats.duration - stats.time_to_first_token
            if tokens and span > 0:
                out.write(f"tokens/s:       {tokens / span:.0f}\n")
        out.write(f"bytes/events:   {stats.bytes} / {stats.events}")
        out.write(f" (heartbeats {stats.heartbeats}, skipped {stats.skipped_frames})\n")
    if survived is not None:
        out.write(f"survived:       {survived}\n")
    # The cause of a drop that was resumed is told by ``survived``; only a bad end needs it.
    bad_end = reply.outcome in (Outcome.TRUNCATED, Outcome.FAILED, None)
    if stream is not None and stream.cause is not None and bad_end:
        out.write(f"cause:          {type(stream.cause).__name__}: {stream.cause}\n")
    out.flush()


def _tokens(reply: Reply) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and total tokens, whatever the format calls them (Responses and
    Anthropic say ``input_tokens`` / ``output_tokens``; Anthropic sends no total)."""
    u = reply.usage
    if u is None:
        return None, None, None
    prompt = u.prompt_tokens if u.prompt_tokens is not None else getattr(u, "input_tokens", None)
    completion = u.completion_tokens
    if completion is None:
        completion = getattr(u, "output_tokens", None)
    total = u.total_tokens
    if total is None and isinstance(prompt, int) and isinstance(completion, int):
        total = prompt + completion
    return prompt, completion, total


# ---------------------------------------------------------------------------- commands


def _tools_for(fmt: str, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Chat-shaped function tools in the shape of ``fmt``'s API."""
    if tools is None or fmt == "chat_completions":
        return tools
    functions = [t["function"] for t in tools]
    if fmt == "responses":
        return [{"type": "function", "name": f["name"], "parameters": f["parameters"]}
                for f in functions]
    return [{"name": f["name"], "input_schema": f["parameters"]} for f in functions]


def _open_stream(
    client: AsyncClient, fmt: str, model: str, messages: list[Any], headers: dict[str, str],
    tools: list[dict[str, Any]] | None, include_usage: bool, fields: dict[str, Any],
    resume: ResumePolicy | None = None,
) -> ReplyStream:
    """The stream of one request in wire format ``fmt`` (``messages`` is the Responses
    ``input`` there; Anthropic gets ``max_tokens`` when not given)."""
    if fmt == "responses":
        return client.responses.stream(
            model=model, input=messages, tools=tools, extra_headers=headers, resume=resume,
            **fields,
        )
    if fmt == "anthropic_messages":
        fields = {"max_tokens": DEFAULT_MAX_TOKENS, **fields}
        return client.messages.stream(
            model=model, messages=messages, tools=tools, extra_headers=headers, resume=resume,
            **fields,
        )
    return client.chat.stream(
        model=model, messages=messages, tools=tools, extra_headers=headers,
        include_usage=include_usage, resume=resume, **fields,
    )


async def _stream_to_terminal(
    client: AsyncClient, session: _Session, model: str, messages: list[Any],
    headers: dict[str, str], tools: list[dict[str, Any]] | None,
    survived: Callable[[ReplyStream], str] | None = None, *, include_usage: bool = True,
    fields: dict[str, Any] | None = None, fmt: str = "chat_completions",
    resume: ResumePolicy | None = None,
) -> int:
    out = sys.stdout
    stream = _open_stream(
        client, fmt, model, messages, headers, tools, include_usage, dict(fields or {}), resume
    )
    session.stream = stream
    state: dict[str, str] = {}
    async with stream:
        async for event in stream:
            _print_live(event, out, state)
            if isinstance(event, Finish):
                state.setdefault("finished", event.reason)
    _summary(stream.reply, stream, out, survived(stream) if survived else None)
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
#: Per format: the demo's default profile and how the client resumes the dropped stream.
#: Responses events carry no ``id:`` on OpenAI's wire, and the client has no ``starting_after``
#: strategy yet, so the demo's server numbers them (``sse-ids``) and the client resumes by
#: ``Last-Event-ID``; Anthropic resumes the Anthropic way, by prefill continuation (``ping``
#: events are its heartbeats).
DEMO_PROFILES = {"chat_completions": DEMO_PROFILE, "responses": "heartbeats,sse-ids",
                 "anthropic_messages": DEMO_PROFILE}


async def _demo(args: argparse.Namespace, session: _Session) -> int:
    from ._cli_demo import LogTally, ReadCountingTransport, survived
    from .server import serve

    headers = _headers(args.header)
    fmt = args.format
    profile = DEMO_PROFILES[fmt]
    if fmt == "anthropic_messages" and args.tools:
        profile += ",sse-ids"  # tool use cannot be continued by a prefill: resume by id
    profile = args.profile or ("" if args.no_faults else profile)
    if profile:
        headers["X-Fluxstream-Profile"] = profile
    defaults: tuple[str, ...] = DEMO_FAULTS
    if fmt == "anthropic_messages":
        # Not right after the newline: a prefill that ends in whitespace is refused by
        # Anthropic (and so by the embedded server), and the client does not yet trim it.
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
    if fmt == "anthropic_messages":
        resume = ResumePolicy(continuation=True)
        # ``fail-first`` counts a continuation (its body differs) only by an attempt key.
        headers.setdefault("X-Fluxstream-Attempt-Key", f"demo-{uuid.uuid4().hex}")
    transport = ReadCountingTransport()
    async with serve(port=0) as server, httpx.AsyncClient(transport=transport) as http:
        sys.stdout.write(f"fluxstream demo: embedded server at {server.base_url}\n\n")
        client = AsyncClient(base_url=server.base_url, api_key="demo-key", http_client=http)
        async with client:
            with LogTally() as log:
                return await _stream_to_terminal(
                    client, session, args.model, [{"role": "user", "content": args.prompt}],
                    headers,
                    _tools_for(fmt, _DEMO_TOOLS if args.tools else None),
                    lambda stream: survived(stream.stats, transport, log),
                    fmt=fmt, resume=resume,
                )


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
    return headers


_BASE_URL_HELP = (
    "the API root; defaults to OPENAI_BASE_URL (ANTHROPIC_BASE_URL + /v1 with --format"
    " anthropic_messages)"
)


def _client(args: argparse.Namespace) -> AsyncClient:
    """The client for ``chat``/``capture``: Anthropic's environment (``ANTHROPIC_BASE_URL``,
    ``ANTHROPIC_API_KEY``) for ``--format anthropic_messages``, OpenAI's otherwise."""
    if args.format == "anthropic_messages":
        return anthropic_client(args.base_url, args.api_key)
    return AsyncClient(base_url=args.base_url, api_key=args.api_key)


async def _chat(args: argparse.Namespace, session: _Session) -> int:
    model, messages, fields = _request(args)
    tools = fields.pop("tools", None)
    if tools is not None and not isinstance(tools, list):
        raise ValueError("tools must be a JSON list")
    async with _client(args) as client:
        return await _stream_to_terminal(
            client, session, model, messages, _headers(args.header), tools,
            include_usage=not args.no_usage, fields=fields, fmt=args.format,
        )


async def _serve(args: argparse.Namespace) -> int:
    from .server import run_forever

    def ready(url: str) -> None:
        sys.stdout.write(f"fluxstream server listening on {url} (profile {args.profile})\n")
        sys.stdout.flush()

    await run_forever(
        host=args.host, port=args.port, profile=args.profile, api_key=args.api_key, ready=ready,
        faults=args.fault,
    )
    return EXIT_OK


def _request(args: argparse.Namespace) -> tuple[str, list[Any], dict[str, Any]]:
    """Model, messages and the other request fields of ``chat``/``capture`` (``--body``, ``-p``,
    ``--max-tokens``); ``model``/``messages`` given as fields replace the flag and the prompt."""
    fields = request_fields(args.body, args.param, args.max_tokens)
    if args.max_tokens is not None and getattr(args, "format", None) == "responses":
        fields["max_output_tokens"] = fields.pop("max_tokens")  # the Responses API's name
    model = fields.pop("model", args.model)
    messages = fields.pop("messages", [{"role": "user", "content": args.prompt}])
    if not isinstance(model, str) or not isinstance(messages, list):
        raise ValueError("model must be a string and messages a list")
    return model, messages, fields


async def _capture(args: argparse.Namespace) -> int:
    """Record a real response's raw bytes with read boundaries and timing (see ``replay``).

    A connection that breaks mid-body is recorded too: every read that arrived, then the error.
    """
    model, messages, fields = _request(args)
    fmt = args.format
    key = "input" if fmt == "responses" else "messages"
    body: dict[str, Any] = {"model": model, key: messages, **fields}
    if fmt == "anthropic_messages":
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    body.setdefault("stream", True)
    if fmt == "chat_completions" and body["stream"] is True and not args.no_usage:
        options = dict(body.get("stream_options") or {})
        options.setdefault("include_usage", True)
        body["stream_options"] = options
    client = _client(args)
    try:
        path = _PATHS[fmt]
        build = client.messages._build() if fmt == "anthropic_messages" else None
        build = build or client._build_request
        request = build(path, body, _headers(args.header))
        response = await client.http_client.send(request, stream=True)
        record = await record_response(response, body, path=path, wire_format=fmt)
    finally:
        await client.aclose()
    await anyio.Path(args.output).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    reads = [base64.b64decode(r["b64"]) for r in record["reads"]]
    size = sum(len(r) for r in reads)
    summary = f"{len(reads)} reads, {size} bytes, to {args.output}"
    if "error" in record:
        error = record["error"]
        sys.stderr.write(
            f"fluxstream: the connection broke ({error['type']}: {error['message']}); "
            f"captured {summary}\n"
        )
        return EXIT_TRUNCATED
    sys.stdout.write(f"captured {summary} (HTTP {record['status']})\n")
    return EXIT_OK if 200 <= record["status"] < 300 else EXIT_FAILED


def load_fixture(path: str) -> list[bytes]:
    """The reads of a capture file, or a plain ``.sse`` body as one read."""
    return load_capture(path).reads


def _replay(args: argparse.Namespace) -> int:
    capture = load_capture(args.file)
    fmt = args.format or capture.wire_format or "chat_completions"
    # A non-2xx status raises its typed error.
    reply = replay_capture(capture, read_size=args.read_size, format=fmt)
    if args.json:
        sys.stdout.write(reply.model_dump_json(indent=2) + "\n")
    else:
        for choice in reply.choices:
            if choice.reasoning:
                sys.stdout.write(f"[reasoning {choice.index}] {choice.reasoning}\n")
            if choice.text:
                sys.stdout.write(f"[text {choice.index}] {choice.text}\n")
            if choice.refusal:
                sys.stdout.write(f"[refusal {choice.index}] {choice.refusal}\n")
            for call in choice.tool_calls:
                sys.stdout.write(f"[tool call {call.index}] {call.name}({call.arguments})\n")
        _summary(reply, None, sys.stdout)
        if capture.error is not None:
            error = capture.error
            sys.stdout.write(f"recorded break: {error.get('type')}: {error.get('message')}\n")
    return _exit_code(reply.outcome)


# ---------------------------------------------------------------------------- entry point


def _request_flags(p: argparse.ArgumentParser) -> None:
    """Any request field, for ``chat`` and ``capture`` alike."""
    p.add_argument("--max-tokens", type=int, default=None, help="sent as max_tokens")
    p.add_argument(
        "-p", "--param", action="append", metavar="KEY=VALUE",
        help="a request field (repeatable); VALUE is JSON when it parses, else a string:"
        " -p n=2 -p temperature=0.2 -p 'stop=[\"\\n\"]'",
    )
    p.add_argument(
        "--body", metavar="JSON",
        help="a JSON object of request fields (tools, n, ...); -p and --max-tokens win over it",
    )
    p.add_argument(
        "--no-usage", action="store_true",
        help="do not ask for usage (no stream_options.include_usage)",
    )


def _format_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--format", choices=FORMATS, default="chat_completions",
        help=f"{what}: chat_completions (default), responses or anthropic_messages",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fluxstream", description="Stream LLM replies correctly from OpenAI-style endpoints."
    )
    sub = p.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="stream a reply live from the embedded server")
    demo.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT)
    demo.add_argument("--model", default="flux-demo")
    demo.add_argument(
        "--profile", help="quirk profile(s), e.g. azure,heartbeats (default: heartbeats)"
    )
    demo.add_argument(
        "--fault", action="append",
        help="a fault, e.g. drop-after=200 (repeatable; replaces the default small writes and"
        " one resumed drop)",
    )
    demo.add_argument("--tools", action="store_true", help="ask for parallel tool calls")
    demo.add_argument(
        "--no-faults", action="store_true",
        help="a clean connection: no heartbeats, small writes or drop (--fault/--profile replace"
        " those defaults)",
    )
    demo.add_argument(
        "--pace", type=float, default=0.03, help="seconds between deltas (0: as fast as possible)"
    )
    demo.add_argument("--header", action="append", help="an extra request header 'Name: value'")
    _format_flag(demo, "the API the demo speaks to its embedded server")

    chat = sub.add_parser("chat", help="stream a reply from any OpenAI-style endpoint")
    chat.add_argument("prompt")
    chat.add_argument("--base-url", default=None, help=_BASE_URL_HELP)
    chat.add_argument("--model", default=os.environ.get("FLUXSTREAM_MODEL", "gpt-4o-mini"))
    chat.add_argument("--api-key", default=None, help="defaults to OPENAI_API_KEY")
    chat.add_argument("--header", action="append", help="an extra request header 'Name: value'")
    _request_flags(chat)
    _format_flag(chat, "the endpoint's API (the prompt is the Responses `input` there)")

    serve = sub.add_parser(
        "serve",
        help="run the embedded server for other clients (/v1/chat/completions, /v1/responses,"
        " /v1/messages)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument("--profile", default="openai")
    serve.add_argument("--api-key", default=None, help="require this key")
    serve.add_argument("--fault", help="default faults for every request, e.g. batch=65536")

    cap = sub.add_parser("capture", help="record a response's raw bytes to a fixture file")
    cap.add_argument("prompt")
    cap.add_argument("-o", "--output", required=True)
    cap.add_argument("--base-url", default=None, help=_BASE_URL_HELP)
    cap.add_argument("--model", default=os.environ.get("FLUXSTREAM_MODEL", "gpt-4o-mini"))
    cap.add_argument("--api-key", default=None)
    cap.add_argument("--header", action="append", help="an extra request header 'Name: value'")
    _request_flags(cap)
    _format_flag(cap, "the endpoint's API; recorded in the capture for replay")

    rep = sub.add_parser("replay", help="run a fixture (capture or .sse) through the parser")
    rep.add_argument("file")
    rep.add_argument("--read-size", type=int, default=0, help="re-split into reads of N bytes")
    rep.add_argument("--json", action="store_true", help="print the reply as JSON")
    rep.add_argument(
        "--format", choices=(*FORMATS, "auto"), default=None,
        help="the wire format (default: the one the capture recorded, else chat_completions;"
        " auto recognises it from the first event)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    session = _Session()
    try:
        if args.command == "replay":
            return _replay(args)
        if args.command == "serve":
            return int(anyio.run(_serve, args))
        if args.command == "capture":
            return int(anyio.run(_capture, args))
        runner = _demo if args.command == "demo" else _chat
        return int(anyio.run(runner, args, session))
    except KeyboardInterrupt:
        stream = session.stream
        if stream is not None:
            _summary(stream.reply, stream, sys.stdout)
            return _exit_code(stream.reply.outcome)
        sys.stderr.write("fluxstream: interrupted\n")
        return EXIT_CANCELLED
    except FluxstreamError as exc:
        sys.stderr.write(f"fluxstream: {type(exc).__name__}: {exc}\n")
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"fluxstream: {exc}\n")
        return EXIT_USAGE
    except Exception as exc:  # an HTTP library's own error (capture): still one line
        sys.stderr.write(f"fluxstream: {type(exc).__name__}: {exc}\n")
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
