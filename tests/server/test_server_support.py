"""Helpers for the server tests (no tests here): a tiny independent SSE parser, a chunk
accumulator, and a raw-socket HTTP client.

They are deliberately written from scratch instead of using ``fluxstream.sse`` or httpx's
parsing, so the server is checked against an implementation that shares no code with it.
"""

from __future__ import annotations

import json
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from fluxstream.server import ExpectedReply


@dataclass
class Event:
    data: str | None
    id: str | None = None
    retry: str | None = None
    event: str | None = None


@dataclass
class Parsed:
    events: list[Event]
    comments: list[str]
    #: A trailing block that had no terminating blank line.
    partial: bool


def parse_sse(raw: bytes) -> Parsed:
    """Split an event stream into events (data lines joined with LF), comments kept apart."""
    text = raw.decode("utf-8")
    lines = re.split(r"\r\n|\r|\n", text)
    events: list[Event] = []
    comments: list[str] = []
    data: list[str] = []
    fields: dict[str, str] = {}
    for line in lines[:-1]:  # the piece after the last terminator is not a complete line
        if line == "":
            if data or fields:
                events.append(Event(data="\n".join(data) if data else None, **fields))
            data, fields = [], {}
            continue
        if line.startswith(":"):
            comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name in ("id", "retry", "event"):
            fields[name] = value
    partial = bool(data or fields or lines[-1])
    return Parsed(events, comments, partial)


@dataclass
class Acc:
    """What a client assembles from chunks (a simplified, independent assembler)."""

    text: dict[int, str] = field(default_factory=dict)
    reasoning: dict[int, str] = field(default_factory=dict)
    tools: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    finish: dict[int, str | None] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    done: bool = False
    chunks: int = 0


def accumulate(events: list[Event]) -> Acc:
    acc = Acc()
    for event in events:
        if event.data is None:
            continue
        if event.data == "[DONE]":
            acc.done = True
            continue
        chunk = json.loads(event.data)
        acc.chunks += 1
        if "error" in chunk:
            acc.error = chunk["error"]
            continue
        if chunk.get("usage"):
            acc.usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            i = choice["index"]
            delta = choice.get("delta") or {}
            acc.text.setdefault(i, "")
            acc.finish.setdefault(i, None)
            if delta.get("content"):
                acc.text[i] += delta["content"]
            if delta.get("reasoning_content"):
                acc.reasoning[i] = acc.reasoning.get(i, "") + delta["reasoning_content"]
            calls = acc.tools.setdefault(i, {})
            for call in delta.get("tool_calls") or []:
                k = call["index"] if "index" in call else len(calls)
                slot = calls.setdefault(k, {"id": None, "name": None, "arguments": ""})
                if call.get("id"):
                    slot["id"] = call["id"]
                function = call.get("function") or {}
                if function.get("name"):
                    slot["name"] = function["name"]
                args = function.get("arguments")
                if isinstance(args, dict):
                    args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
                slot["arguments"] += args or ""
            if choice.get("finish_reason"):
                acc.finish[i] = choice["finish_reason"]
    return acc


def assert_matches(acc: Acc, expected: ExpectedReply) -> None:
    """The accumulated reply is exactly the expected one."""
    assert sorted(acc.text) == [c.index for c in expected.choices]
    for choice in expected.choices:
        assert acc.text[choice.index] == choice.text
        assert acc.reasoning.get(choice.index) == choice.reasoning
        assert acc.finish[choice.index] == choice.finish_reason
        calls = acc.tools.get(choice.index, {})
        got = [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
        assert got == [(t.id, t.name, t.arguments) for t in choice.tool_calls]
    assert acc.usage == expected.usage
    assert acc.error == expected.error
    assert acc.done == expected.done


# -- raw HTTP over a socket --------------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    #: The chunked body ended with its terminator (``0\r\n\r\n``).
    complete: bool
    raw: bytes
    reads: list[int]


def request_bytes(
    path: str, body: dict[str, Any] | None, headers: dict[str, str] | None = None
) -> bytes:
    payload = json.dumps(body).encode() if body is not None else b""
    method = "POST" if body is not None else "GET"
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def dechunk(data: bytes) -> tuple[bytes, bool]:
    """Decode a chunked body; returns (body so far, whether the terminator arrived)."""
    out = bytearray()
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return bytes(out), False
        size = int(data[pos:end].split(b";")[0], 16)
        start = end + 2
        if size == 0:
            return bytes(out), data[start : start + 2] == b"\r\n"
        chunk = data[start : start + size]
        out += chunk
        if len(chunk) < size or data[start + size : start + size + 2] != b"\r\n":
            return bytes(out), False
        pos = start + size + 2


def parse_response(raw: bytes, reads: list[int] | None = None) -> RawResponse:
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body, complete = dechunk(rest)
    else:
        body = rest
        complete = len(rest) == int(headers.get("content-length", len(rest)))
    return RawResponse(int(status_line.split()[1]), headers, body, complete, raw, reads or [])


def raw_exchange(
    port: int,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> RawResponse:
    """Blocking: send one request with ``Connection: close``, read until the server closes."""
    reads: list[int] = []
    data = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request_bytes(path, body, headers))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            reads.append(len(piece))
            data += piece
    return parse_response(bytes(data), reads)


async def araw_exchange(
    port: int,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> RawResponse:
    """Async :func:`raw_exchange` (anyio: works on asyncio and trio)."""
    import anyio

    reads: list[int] = []
    data = bytearray()
    with anyio.fail_after(timeout):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request_bytes(path, body, headers))
            while True:
                try:
                    piece = await stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
                reads.append(len(piece))
                data += piece
    return parse_response(bytes(data), reads)


def chat(prompt: str = "Hello there, world", **extra: Any) -> dict[str, Any]:
    """A chat-completions request body."""
    body: dict[str, Any] = {
        "model": "fluxstream-echo",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": prompt},
        ],
        "stream": True,
    }
    body.update(extra)
    return body


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                    "days": {"type": "integer"},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "clock"}},
]
