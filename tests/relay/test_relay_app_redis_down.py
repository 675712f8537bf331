"""The example relay app (``examples/relay_app.py``) with ``REDIS_URL`` set and Redis away.

At start-up it must not serve at all: one clear line and a non-zero exit (it started, answered
``POST /replies`` 200, then a bare 500 with a 110-line traceback for the page's event stream).
When Redis goes away later, each request gets a 503 with a short JSON body.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from relay_support import RedisServer, free_port

from fluxstream.server import ServerThread

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "relay_app.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("relay_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


def test_serve_with_redis_unreachable_exits_with_one_line() -> None:
    pytest.importorskip("uvicorn")
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--serve", "--port", str(free_port())],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Redis" in lines[0] and "REDIS_URL" in lines[0]
    assert not result.stdout


def test_the_app_does_not_start_with_redis_unreachable(upstream: ServerThread) -> None:
    """Run by another ASGI server (``uvicorn relay_app:app``), the start-up check still stops
    the app before it serves anything."""
    testclient = pytest.importorskip("starlette.testclient")
    from fluxstream.relay import RedisReplyLog

    example = load_example()
    log = RedisReplyLog(f"redis://127.0.0.1:{free_port()}/0")
    app = example.make_app(log, upstream.base_url)
    with pytest.raises(example.StartupError) as raised:
        with testclient.TestClient(app):
            pass
    assert "\n" not in str(raised.value) and "Redis" in str(raised.value)


def test_redis_going_away_later_is_a_503_with_a_short_body(upstream: ServerThread) -> None:
    testclient = pytest.importorskip("starlette.testclient")
    from fluxstream.relay import RedisReplyLog

    example = load_example()
    redis = RedisServer().start()
    try:
        app = example.make_app(RedisReplyLog(redis.url, prefix="down:"), upstream.base_url)
        with testclient.TestClient(app, raise_server_exceptions=False) as client:
            started = client.post("/replies", json={"prompt": "x", "max_tokens": 5})
            assert started.status_code == 200
            key = started.json()["key"]
            assert client.get(f"/replies/{key}/events").status_code == 200
            redis.kill()
            answers = [
                client.post("/replies", json={"prompt": "y", "max_tokens": 5}),
                client.get(f"/replies/{key}/events"),
                client.post(f"/replies/{key}/stop"),
            ]
    finally:
        redis.stop()
    for response in answers:
        assert response.status_code == 503, (response.request.url, response.text[:300])
        assert len(response.content) < 200 and "Traceback" not in response.text
        assert response.json()["error"]
        assert response.headers.get("retry-after")
