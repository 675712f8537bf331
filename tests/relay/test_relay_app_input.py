"""The example relay app (``examples/relay_app.py``) refuses what a page may send that it
cannot serve: a body that is not JSON or not an object, and ``max_tokens`` that is not a number
or is out of range, each a 400 before any upstream request (it was a 500, and any
``max_tokens`` went upstream); a body over its bound (a 413) and a bad ``?cut=`` (a 400). It
shows where authentication goes, and keeps reply keys out of uvicorn's access log."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluxstream.relay import MemoryReplyLog
from fluxstream.server import ServerThread

ROOT = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a request that went out would fail


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("relay_app", ROOT / "examples" / "relay_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'{"max_tokens": "many"}', b'{"max_tokens": 1000000000}',
     b'{"max_tokens": 0}', b"[" * 50_000, b'{"max_tokens": Infinity}'],
    ids=["not-json", "not-an-object", "not-a-number", "too-many", "zero", "deep", "infinite"],
)
def test_a_bad_request_from_the_page_is_a_400(body: bytes) -> None:
    testclient = pytest.importorskip("starlette.testclient")
    example = load_example()
    upstream = "http://127.0.0.1:9/v1"  # nothing listens: a request that went out would fail
    with testclient.TestClient(example.make_app(MemoryReplyLog(), upstream)) as client:
        response = client.post("/replies", content=body)
    assert response.status_code == 400, response.text
    assert "error" in response.json()


# ---------------------------------------------------------------------------- bounds, hooks


@pytest.fixture
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


def test_a_body_over_the_limit_is_a_413_before_it_is_read_whole() -> None:
    testclient = pytest.importorskip("starlette.testclient")
    example = load_example()
    big = b'{"prompt": "' + b"a" * (example.MAX_BODY_BYTES + 1) + b'"}'
    with testclient.TestClient(example.make_app(MemoryReplyLog(), DEAD)) as client:
        declared = client.post("/replies", content=big)
        chunked = client.post("/replies", content=iter([big[:1000], big[1000:]]))
    for response in (declared, chunked):
        assert response.status_code == 413, response.text[:200]
        assert "error" in response.json()


@pytest.mark.parametrize("cut", ["abc", "-1", "1e3", "9" * 30, ""])
def test_a_bad_cut_is_a_400(upstream: ServerThread, cut: str) -> None:
    """``?cut=`` is the page's test hook (drop the event stream after N events): anything
    but a small count was a 500 with a traceback in the log."""
    testclient = pytest.importorskip("starlette.testclient")
    example = load_example()
    with testclient.TestClient(example.make_app(MemoryReplyLog(), upstream.base_url)) as client:
        key = client.post("/replies", json={"prompt": "cut", "max_tokens": 5}).json()["key"]
        bad = client.get(f"/replies/{key}/events", params={"cut": cut})
        good = client.get(f"/replies/{key}/events", params={"cut": "3"})
    assert bad.status_code == 400 and "cut" in bad.json()["error"]
    assert good.status_code == 200 and good.text.count("\nevent: ") + 1 >= 3


def test_with_a_token_configured_every_reply_route_needs_it(upstream: ServerThread) -> None:
    testclient = pytest.importorskip("starlette.testclient")
    example = load_example()
    app = example.make_app(MemoryReplyLog(), upstream.base_url, auth_token="s3cret")
    with testclient.TestClient(app) as client:
        assert client.get("/").status_code == 200  # the page itself is public
        assert client.post("/replies", json={"prompt": "x"}).status_code == 401
        wrong = {"authorization": "Bearer s3cre"}
        assert client.post("/replies", json={"prompt": "x"}, headers=wrong).status_code == 401
        right = {"authorization": "Bearer s3cret"}
        started = client.post("/replies", json={"prompt": "x", "max_tokens": 5}, headers=right)
        assert started.status_code == 200
        key = started.json()["key"]
        assert client.get(f"/replies/{key}/events").status_code == 401
        assert client.post(f"/replies/{key}/stop").status_code == 401
        # A page authenticates its EventSource by cookie (it cannot send headers).
        client.cookies.set("relay_token", "s3cret")
        assert client.get(f"/replies/{key}/events").status_code == 200
        assert client.post(f"/replies/{key}/stop").status_code == 200


def test_reply_keys_stay_out_of_the_access_log(upstream: ServerThread) -> None:
    """A reply key is a capability (whoever has it can follow or stop the reply); the page's
    EventSource must carry it in the URL, so uvicorn's access log is filtered."""
    uvicorn = pytest.importorskip("uvicorn")
    import httpx
    from relay_support import free_port

    example = load_example()
    port = free_port()
    config = uvicorn.Config(example.make_app(MemoryReplyLog(), upstream.base_url),
                            host="127.0.0.1", port=port, log_level="info")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    access = logging.getLogger("uvicorn.access")
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        access.addHandler(handler)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            key = http.post("/replies", json={"prompt": "x", "max_tokens": 5}).json()["key"]
            assert http.get(f"/replies/{key}/events").status_code == 200
            assert http.post(f"/replies/{key}/stop").status_code == 200
            assert http.get(f"/replies/{key}/events?cut=2").status_code == 200
    finally:
        access.removeHandler(handler)
        server.should_exit = True
        thread.join(10)
    assert len([line for line in seen if "/replies/" in line]) == 3, seen
    assert not [line for line in seen if key in line], seen
