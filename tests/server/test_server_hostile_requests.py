"""The embedded server against hostile request bodies (``fluxstream serve`` is public).

A body the server cannot handle must get an HTTP error answer, never a dropped connection
(the handler crashed: ``log.exception`` and no response) and never a hang of the whole server
(it runs on one event loop, so one request that spins blocks every other connection).
Each case is one way a body once broke the server: a deeply nested body raised
``RecursionError`` out of ``json.loads``; a schema bound ``Infinity`` (Python's ``json``
accepts it) raised ``OverflowError`` in the schema-shaped value; ``minLength: 1000000000``
built a gigabyte string (the server stopped answering everyone).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from fluxstream.server import ServerThread
from fluxstream.server.schema_value import schema_value

PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")


@pytest.fixture(scope="module")
def running() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as server:
        yield server


def _body(path: str, extra: str) -> bytes:
    """A minimal request of ``path``'s dialect with ``extra`` JSON members appended."""
    head = {
        "/v1/chat/completions": '{"model":"m","messages":[{"role":"user","content":"hi"}]',
        "/v1/responses": '{"model":"m","input":"hi"',
        "/v1/messages": '{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hi"}]',
    }[path]
    return (head + ("," + extra if extra else "") + "}").encode()


def _schema_members(path: str, schema: str) -> str:
    """``schema`` as the dialect's structured-output request (a forced tool for Messages)."""
    if path == "/v1/chat/completions":
        return ('"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":'
                + schema + "}}")
    if path == "/v1/responses":
        return '"text":{"format":{"type":"json_schema","name":"x","schema":' + schema + "}}"
    return ('"tools":[{"name":"x","input_schema":' + schema + '}],'
            '"tool_choice":{"type":"tool","name":"x"}')


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("depth", [990, 100_000])
def test_a_deeply_nested_body_gets_a_400_not_a_dropped_connection(
    running: ServerThread, path: str, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    for body in (nested.encode(), _body(path, '"metadata":' + nested)):
        response = httpx.post(running.url + path, content=body, timeout=10)
        assert response.status_code == 400, (depth, response.text[:200])
    # The server still answers normally.
    assert httpx.post(running.url + path, content=_body(path, ""), timeout=10).status_code == 200


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "schema",
    [
        '{"type":"object","properties":{"n":{"type":"integer","minimum":Infinity}},'
        '"required":["n"]}',
        '{"type":"object","properties":{"n":{"type":"number","maximum":-Infinity,'
        '"minimum":NaN}},"required":["n"]}',
        '{"type":"object","properties":{"s":{"type":"string","minLength":1000000000}},'
        '"required":["s"]}',
    ],
    ids=["int-infinity", "number-nan", "huge-min-length"],
)
def test_absurd_schema_bounds_get_an_answer_promptly(
    running: ServerThread, path: str, schema: str
) -> None:
    for stream in ("false", "true"):
        body = _body(path, _schema_members(path, schema) + ',"stream":' + stream)
        response = httpx.post(running.url + path, content=body, timeout=10)
        assert response.status_code in (200, 400), response.text[:200]
        assert len(response.content) < 4 * 1024 * 1024


def test_schema_values_stay_finite_and_bounded() -> None:
    value = schema_value({"type": "object", "properties": {
        "i": {"type": "integer", "minimum": float("inf")},
        "f": {"type": "number", "minimum": float("nan"), "maximum": float("-inf")},
        "s": {"type": "string", "minLength": 10**9},
    }, "required": ["i", "f", "s"]})
    text = json.dumps(value, allow_nan=False)  # raises on NaN/Infinity
    assert len(text) < 100_000


def test_a_server_with_a_record_limit_keeps_only_the_latest_records() -> None:
    """The records are a test API; ``fluxstream serve`` (``run_forever``) runs for long and
    nobody can read its records, which kept every request with its parsed body (up to
    8 MiB each) and every disconnect: memory grew with every request and connection."""
    with ServerThread(profile="openai") as unbounded:
        pass
    assert unbounded.server.records.limit is None
    import anyio

    from fluxstream.server import serve

    async def main() -> tuple[int, int, int]:
        async with serve(record_limit=2) as server, httpx.AsyncClient() as client:
            for n in range(5):
                body = _body("/v1/chat/completions", f'"user":"u{n}"')
                response = await client.post(server.url + "/v1/chat/completions", content=body)
                assert response.status_code == 200
            records = server.records
            assert [r.json["user"] for r in records.requests] == ["u3", "u4"]
            return len(records.requests), len(records.responses), len(records.disconnects)

    assert anyio.run(main) == (2, 2, 0)


def test_run_forever_keeps_no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    from collections.abc import AsyncIterator
    from types import SimpleNamespace

    import anyio

    from fluxstream.server import runner

    seen: dict[str, object] = {}

    class Ready(Exception):
        pass

    @contextlib.asynccontextmanager
    async def fake_serve(*args: object, **kwargs: object) -> AsyncIterator[SimpleNamespace]:
        seen.update(kwargs)
        yield SimpleNamespace(base_url="http://127.0.0.1:1/v1")

    def ready(url: str) -> None:
        raise Ready(url)

    monkeypatch.setattr(runner, "serve", fake_serve)
    with pytest.raises(Ready):
        anyio.run(lambda: runner.run_forever(ready=ready))
    assert seen.get("record_limit") == 0


def test_a_client_that_stops_reading_is_dropped_after_the_idle_timeout() -> None:
    """A client that sends a request and never reads the (long) answer: once the socket's
    buffers are full, the server's ``send`` waited for it forever -- a task and a connection
    held for as long as the client liked (the write side of a slowloris). A write that makes
    no progress for ``idle_timeout`` now ends the connection."""
    import socket
    import time

    with ServerThread(profile="openai", idle_timeout=0.5) as server:
        body = json.dumps({"model": "m@fill-max-tokens", "stream": True, "max_tokens": 100_000,
                           "messages": [{"role": "user", "content": "a long one"}]}).encode()
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(head.encode() + body)
            # Generous: the server builds the 100k events first (seconds on a loaded machine).
            deadline = time.monotonic() + 60
            while not server.records.responses and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.records.responses, "the server still waits on a client that never reads"
            assert server.records.responses[0].ending in ("client-disconnect", "dropped")


@pytest.mark.parametrize("path", PATHS)
def test_a_lone_surrogate_in_the_body_gets_an_answer(running: ServerThread, path: str) -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``) that UTF-8 cannot encode: hashing the
    request for its reply id raised, and the connection was dropped without an answer."""
    body = _body(path, '"metadata":{"note":"\\ud800 \\udfff"}').replace(b'"hi"', b'"\\ud83d"')
    response = httpx.post(running.url + path, content=body, timeout=10)
    assert response.status_code == 200, response.text[:200]
