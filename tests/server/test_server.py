"""The embedded server over real sockets: endpoints, profiles, resume, keep-alive, records.

Every test runs on asyncio and trio (anyio's pytest plugin); the server runs in the test's own
event loop here, so both server backends are covered. Clients are raw httpx or raw sockets.
"""

from __future__ import annotations

import json
import time

import anyio
import httpx
import pytest
from test_server_support import (
    TOOLS,
    accumulate,
    araw_exchange,
    assert_matches,
    chat,
    parse_sse,
)
from waiting import WITHIN, until

from fluxstream.server import (
    PROFILE_NAMES,
    Server,
    ServerThread,
    expected_reply,
    serve,
)

pytestmark = pytest.mark.anyio

URL = "/v1/chat/completions"
#: A disconnect is noticed by the connection's reader, not by the next write: within this bound,
#: which leaves room for a loaded worker's stalls (the write-side path takes ``DRIP`` or more).
PROMPT = 2.0
#: The gap between events where a prompt disconnect must be noticed.
DRIP = 10.0


async def post(server: Server, body: dict[str, object], **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        return await client.post(URL, json=body, headers=headers)


async def test_stream_reference_framing(aserver: Server) -> None:
    body = chat(max_tokens=5)
    response = await post(aserver, body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    raw = response.content
    assert raw.startswith(b"id: 1\nretry: 50\ndata: {")
    assert raw.endswith(b"data: [DONE]\n\n")
    assert b"\r" not in raw
    parsed = parse_sse(raw)
    assert not parsed.partial and not parsed.comments
    assert [e.id for e in parsed.events] == [str(i) for i in range(1, len(parsed.events) + 1)]
    assert [e.retry for e in parsed.events].count("50") == 1
    assert_matches(accumulate(parsed.events), expected_reply(body))
    first = json.loads(parsed.events[0].data or "")
    assert first["object"] == "chat.completion.chunk" and first["model"] == "fluxstream-echo"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}


async def test_same_request_same_bytes(aserver: Server) -> None:
    body = chat(tools=TOOLS, n=2, stream_options={"include_usage": True})
    first = await araw_exchange(aserver.port, URL, body)
    second = await araw_exchange(aserver.port, URL, body)
    assert first.raw.split(b"\r\n", 1)[1] != b""
    strip = [(k, v) for k, v in first.headers.items() if k != "x-request-id"]
    assert strip == [(k, v) for k, v in second.headers.items() if k != "x-request-id"]
    assert first.body == second.body and first.complete and second.complete


async def test_non_streaming_completion_has_same_content(aserver: Server) -> None:
    body = chat(stream=False, tools=TOOLS[:2], reasoning_effort="low")
    response = await post(aserver, body)
    assert response.headers["content-type"] == "application/json"
    data = response.json()
    expected = expected_reply(body)
    assert data["object"] == "chat.completion" and data["id"] == expected.id
    message = data["choices"][0]["message"]
    assert message["content"] is None
    assert message["reasoning_content"] == expected.choices[0].reasoning
    calls = [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]
    ]
    assert calls == [(t.id, t.name, t.arguments) for t in expected.choices[0].tool_calls]
    assert data["usage"] == expected.usage
    text_body = chat(stream=False)
    text = (await post(aserver, text_body)).json()
    assert text["choices"][0]["message"]["content"] == expected_reply(text_body).text
    assert text["choices"][0]["finish_reason"] == "stop"


async def test_models_404_405_400(aserver: Server) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        models = await client.get("/models")
        assert models.status_code == 200
        assert [m["id"] for m in models.json()["data"]] == [
            "fluxstream-echo",
            "fluxstream-reasoner",
        ]
        missing = await client.get("/nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        wrong = await client.get("/chat/completions")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        bad = await client.post("/chat/completions", content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
        bad_profile = await client.post(
            "/chat/completions", json=chat(), headers={"X-Fluxstream-Profile": "nope"}
        )
        assert bad_profile.status_code == 400 and "nope" in bad_profile.json()["error"]["message"]
        bad_fault = await client.post(
            "/chat/completions", json=chat(), headers={"X-Fluxstream-Fault": "nope=1"}
        )
        assert bad_fault.status_code == 400


async def test_api_key_check_and_redaction(anyio_backend: str) -> None:
    async with serve(api_key="sk-secret") as server:
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            missing = await client.post("/chat/completions", json=chat())
            assert missing.status_code == 401
            assert missing.json()["error"]["code"] == "invalid_api_key"
            wrong = await client.get("/models", headers={"Authorization": "Bearer sk-wrong"})
            assert wrong.status_code == 401 and "Incorrect" in wrong.json()["error"]["message"]
            ok = await client.post(
                "/chat/completions", json=chat(), headers={"Authorization": "Bearer sk-secret"}
            )
            assert ok.status_code == 200 and b"[DONE]" in ok.content
        auth = [r.header("authorization") for r in server.records.requests]
        assert auth == [None, "Bearer <redacted>", "Bearer <redacted>"]
        assert "sk-secret" not in repr(server.records.requests)


def check_profile_bytes(profile: str, raw: bytes) -> None:
    """What each profile must look like on the wire, beyond the content."""
    text = raw.decode()
    if profile == "openai":
        assert text.endswith("data: [DONE]\n\n") and "data: {" in text
    elif profile == "azure":
        first = parse_sse(raw).events[0]
        chunk = json.loads(first.data or "")
        assert chunk["choices"] == [] and chunk["id"] == "" and chunk["model"] == ""
        assert "prompt_filter_results" in chunk
    elif profile == "no-done":
        assert "[DONE]" not in text
    elif profile == "nospace":
        assert "data: " not in text and "data:{" in text and "id:1\n" in text
    elif profile == "crlf":
        assert text.count("\r\n") == text.count("\n") and "\r\n\r\n" in text
    elif profile == "heartbeats":
        parsed = parse_sse(raw)
        assert parsed.comments and len(parsed.comments) == len(parsed.events) - 1
    elif profile == "multiline":
        for event in parse_sse(raw).events:
            if event.data != "[DONE]":
                assert "\n" in (event.data or "")
    elif profile == "repeat-role":
        for event in parse_sse(raw).events[:-1]:
            for choice in json.loads(event.data or "")["choices"]:
                assert choice["delta"]["role"] == "assistant"
    elif profile == "indexless-tools":
        assert '"tool_calls":[{"id"' in text
    elif profile == "object-args":
        assert '"arguments":{' in text
    elif profile == "reasoning":
        assert "reasoning_content" in text
        assert text.index("reasoning_content") < text.index('"content":"Hello')
    elif profile.startswith("error-midstream"):
        assert '{"error":{' in text
        assert text.endswith("data: [DONE]\n\n") == (profile == "error-midstream-done")


@pytest.mark.parametrize("profile", [p for p in PROFILE_NAMES if p != "json"])
async def test_each_profile_by_header(aserver: Server, profile: str) -> None:
    tools = profile in ("indexless-tools", "object-args")
    body = chat(tools=TOOLS) if tools else chat(n=2)
    response = await post(aserver, body, **{"X-Fluxstream-Profile": profile})
    assert response.status_code == 200
    assert response.headers["x-fluxstream-profile"] == profile
    assert_matches(accumulate(parse_sse(response.content).events), expected_reply(body, profile))
    check_profile_bytes(profile, response.content)


async def test_json_profile_ignores_stream(aserver: Server) -> None:
    body = chat(model="fluxstream-echo@json")
    response = await post(aserver, body)
    assert response.headers["content-type"] == "application/json"
    data = response.json()
    assert data["choices"][0]["message"]["content"] == expected_reply(body).text
    assert data["model"] == "fluxstream-echo"
    assert not expected_reply(body).streamed


async def test_profiles_combine_by_model_suffix_and_server_default(anyio_backend: str) -> None:
    combo = "azure,crlf,heartbeats,multiline,nospace,repeat-role,reasoning,no-done"
    body = chat(model=f"m@{combo}", n=2, stream_options={"include_usage": True})
    async with serve(profile="azure,crlf") as server:
        response = await post(server, body)
        raw = response.content
        assert raw.count(b"\r\n") == raw.count(b"\n") and b"[DONE]" not in raw
        assert b"data:{" in raw and b": ping" in raw
        assert_matches(accumulate(parse_sse(raw).events), expected_reply(body))
        # the server default applies when the request names no profile
        plain = chat()
        default = await post(server, plain)
        assert default.content.startswith(b'id: 1\r\nretry: 50\r\ndata: {"choices":[]')
        assert_matches(
            accumulate(parse_sse(default.content).events), expected_reply(plain, "azure")
        )
        # and a request can ask for the reference behaviour explicitly
        reference = await post(server, plain, **{"X-Fluxstream-Profile": "openai"})
        assert reference.content.startswith(b'id: 1\nretry: 50\ndata: {"id":"chatcmpl-')


async def test_tools_n_and_usage(aserver: Server) -> None:
    body = chat(tools=TOOLS, n=2, stream_options={"include_usage": True})
    response = await post(aserver, body)
    events = parse_sse(response.content).events
    expected = expected_reply(body)
    assert_matches(accumulate(events), expected)
    chunks = [json.loads(e.data or "") for e in events if e.data != "[DONE]"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == expected.usage
    assert all(c["usage"] is None for c in chunks[:-1])
    choice_order = [c["choices"][0]["index"] for c in chunks[:-1]]
    assert choice_order[:4] == [0, 1, 0, 1]  # choices interleaved
    call_order = [
        c["choices"][0]["delta"]["tool_calls"][0]["index"]
        for c in chunks[:-1]
        if c["choices"][0]["index"] == 0 and c["choices"][0]["delta"].get("tool_calls")
    ]
    assert call_order[:6] == [0, 1, 2, 0, 1, 2]  # calls interleaved
    assert [c["choices"][0]["finish_reason"] for c in chunks[-3:-1]] == ["tool_calls"] * 2


@pytest.mark.parametrize("profile", ["openai", "multiline,crlf", "heartbeats,azure"])
async def test_resume_with_last_event_id(aserver: Server, profile: str) -> None:
    body = chat(n=2, stream_options={"include_usage": True})
    hdr = {"X-Fluxstream-Profile": profile}
    full = parse_sse((await post(aserver, body, **hdr)).content).events
    for last in (1, 5, len(full) - 1, len(full)):
        rest = parse_sse((await post(aserver, body, **hdr, **{"Last-Event-ID": str(last)})).content)
        assert rest.events[:1] == [] or rest.events[0].retry == "50"
        assert [(e.id, e.data) for e in rest.events] == [(e.id, e.data) for e in full[last:]]
    record = aserver.records.requests[-1]
    assert record.last_event_id == str(len(full))


async def test_keep_alive_and_records(aserver: Server) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        for i in range(4):
            response = await client.post("/chat/completions", json=chat(f"turn {i}", max_tokens=3))
            assert response.status_code == 200
        await client.get("/models")
    requests = aserver.records.requests
    assert len(requests) == 5 and len({r.connection for r in requests}) == 1
    assert [r.method for r in requests] == ["POST"] * 4 + ["GET"]
    assert requests[0].json["messages"][1]["content"] == "turn 0"
    assert requests[0].path == "/v1/chat/completions" and requests[0].time <= requests[1].time
    responses = aserver.records.responses
    assert [r.ending for r in responses] == ["complete"] * 5
    assert responses[0].events == 1 + 3 + 1 + 1
    # closing the pool is a client disconnect after completed responses
    record = await aserver.wait_disconnect(WITHIN)
    assert record.completed and record.request == requests[-1].seq


async def test_disconnect_mid_stream_is_recorded_promptly(aserver: Server) -> None:
    """Noticed by the reader while the writer sleeps in its drip: a server that found out
    only by its next write would take ``DRIP`` seconds or more, far beyond the bound (which
    leaves room for a loaded worker's stalls)."""
    body = chat(max_tokens=200)
    async with (
        httpx.AsyncClient(base_url=aserver.base_url) as client,
        client.stream(
            "POST", "/chat/completions", json=body,
            headers={"X-Fluxstream-Fault": f"drip={DRIP}"},
        ) as response,
    ):
        async for _ in response.aiter_bytes():
            break
        closed_at = time.monotonic()
    record = await aserver.wait_disconnect(WITHIN)
    assert not record.completed
    assert record.time - closed_at < PROMPT
    assert record.bytes_written > 0 and record.wire_bytes > record.bytes_written
    assert record.request == aserver.records.requests[-1].seq
    # the response's record follows once its cancelled writer has unwound
    await until(lambda: aserver.records.responses, "the response's record")
    assert aserver.records.responses[-1].ending == "client-disconnect"


async def test_disconnect_detected_while_server_stalls(aserver: Server) -> None:
    async with anyio.create_task_group():
        stream = await anyio.connect_tcp("127.0.0.1", aserver.port)
        request = (
            f"POST {URL} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "X-Fluxstream-Fault: stall=30,stall-after-events=2\r\n"
        )
        payload = json.dumps(chat()).encode()
        await stream.send(f"{request}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        await stream.receive()
        await anyio.sleep(0.1)  # the server is now sleeping in the stall, not writing
        closed_at = time.monotonic()
        await stream.aclose()
    record = await aserver.wait_disconnect(WITHIN, completed=False)
    # the stall is 30 s: noticed by the reader, not by a write after the stall
    assert record.time - closed_at < PROMPT and record.reason in ("eof", "reset")


async def test_shutdown_is_prompt_with_clients_connected(anyio_backend: str) -> None:
    started = time.monotonic()
    with anyio.fail_after(20):  # the stall is 60 s
        async with serve() as server:
            stream = await anyio.connect_tcp("127.0.0.1", server.port)
            payload = json.dumps(chat()).encode()
            await stream.send(
                f"POST {URL} HTTP/1.1\r\nHost: x\r\nX-Fluxstream-Fault: stall=60\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await stream.receive()
            idle = await anyio.connect_tcp("127.0.0.1", server.port)
        assert time.monotonic() - started < PROMPT * 2  # not the 60 s stall
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            for _ in range(100):
                await stream.receive()
        await stream.aclose()
        await idle.aclose()


def test_server_thread_for_sync_code() -> None:
    with ServerThread(profile="nospace") as server:
        response = httpx.post(server.base_url + "/chat/completions", json=chat(max_tokens=2))
        assert response.content.startswith(b"id:1\n")
        with httpx.stream(
            "POST",
            server.base_url + "/chat/completions",
            json=chat(max_tokens=100),
            headers={"X-Fluxstream-Fault": "drip=0.05"},
        ) as stream:
            next(stream.iter_bytes())
        record = server.wait_disconnect_sync(WITHIN, completed=False)
        assert record.bytes_written > 0
    assert len(server.records.requests) == 2  # the records outlive the server
    with pytest.raises(RuntimeError):
        _ = ServerThread().base_url  # not started


async def test_server_thread_from_async_code(server: ServerThread) -> None:
    response = await post(server.server, chat())
    assert_matches(accumulate(parse_sse(response.content).events), expected_reply(chat()))


async def test_errors_in_the_body_are_not_wrapped(anyio_backend: str) -> None:
    with pytest.raises(ValueError, match="boom"):
        async with serve():
            raise ValueError("boom")


async def test_client_half_request_then_close_is_recorded(aserver: Server) -> None:
    stream = await anyio.connect_tcp("127.0.0.1", aserver.port)
    await stream.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    await anyio.sleep(0.05)
    await stream.aclose()
    record = await aserver.wait_disconnect(WITHIN)
    assert record.request is None and record.completed


async def test_pipelined_requests_are_answered_in_order(aserver: Server) -> None:
    first = json.dumps(chat("one", max_tokens=3)).encode()
    second = json.dumps(chat("two", max_tokens=3)).encode()
    head = f"POST {URL} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    data = (
        f"{head}Content-Length: {len(first)}\r\n\r\n".encode()
        + first
        + f"{head}Connection: close\r\nContent-Length: {len(second)}\r\n\r\n".encode()
        + second
    )
    received = bytearray()
    with anyio.fail_after(5):
        async with await anyio.connect_tcp("127.0.0.1", aserver.port) as stream:
            await stream.send(data)
            while True:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    assert received.count(b"HTTP/1.1 200 OK") == 2
    one, two = (expected_reply(chat(p, max_tokens=3)).id.encode() for p in ("one", "two"))
    assert received.index(one) < received.index(two)  # each reply's id names its request
    assert [r.json["messages"][1]["content"] for r in aserver.records.requests] == ["one", "two"]
    assert len({r.connection for r in aserver.records.requests}) == 1


async def test_head_and_garbage_do_not_break_the_server(aserver: Server) -> None:
    for junk in (b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00\x01garbage\r\n\r\n"):
        async with await anyio.connect_tcp("127.0.0.1", aserver.port) as stream:
            await stream.send(junk)
            with anyio.move_on_after(2):
                try:
                    while await stream.receive():
                        pass
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
    response = await post(aserver, chat())
    assert response.status_code == 200


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_server_thread_backends_and_prompt_stop(backend: str) -> None:
    server = ServerThread(backend=backend, faults="stall=60,stall-after-events=1").start()
    with httpx.stream("POST", server.base_url + "/chat/completions", json=chat()) as response:
        chunks = response.iter_bytes()
        next(chunks)
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < PROMPT * 2  # not the 60 s stall
        with pytest.raises(httpx.HTTPError):
            for _ in chunks:
                pass
    assert server.records.responses[-1].ending == "shutdown"


async def test_run_forever_reports_ready(anyio_backend: str) -> None:
    from fluxstream.server import run_forever

    urls: list[str] = []
    ready = anyio.Event()

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_forever(port=0, ready=on_ready))
        with anyio.fail_after(5):
            await ready.wait()
        async with httpx.AsyncClient() as client:
            assert (await client.get(urls[0] + "/models")).status_code == 200
        tg.cancel_scope.cancel()
    assert urls[0].startswith("http://127.0.0.1:") and urls[0].endswith("/v1")


def test_the_server_and_its_thread_wait_for_disconnects_as_the_records_do() -> None:
    """The waits are written once (``DisconnectWaits``): the records, the server and the
    server thread find, wait and time out alike."""
    import socket

    with ServerThread() as thread:
        holders = (thread, thread.server, thread.records)
        assert all(h.find_disconnect() is None for h in holders)
        for holder in holders:
            with pytest.raises(TimeoutError):
                holder.wait_disconnect_sync(0.01)
        with socket.create_connection(("127.0.0.1", thread.port), timeout=5) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        records = [h.wait_disconnect_sync(5.0, completed=True) for h in holders]
        assert records[0] is records[1] is records[2] is thread.find_disconnect()
