"""The example relay page in a real browser: headless Chromium (Debian's ``chromium``).

The app (``examples/relay_app.py``) runs under uvicorn in a thread of this process, its upstream
is the embedded server (so the server's records prove that Stop closed the upstream). Chromium
loads the page with ``--virtual-time-budget`` and ``--dump-dom``; the page's test hooks (query
string) make the app drop the page's event stream every few events, reload the page mid-reply,
or press Stop. The page marks its title ``TWICE`` if any character arrives twice.
A screenshot of the page after the reply is kept in ``$FLUXSTREAM_ARTIFACTS`` (default
``/tmp/fluxstream-artifacts``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from browser_support import chromium, load_example, needs_chromium, rendered, serve_app

from fluxstream.relay import MemoryReplyLog
from fluxstream.server import ServerThread, expected_reply

PROMPT = "browser"
pytestmark = needs_chromium


@contextmanager
def app_with_upstream(drip: float) -> Iterator[tuple[str, ServerThread]]:
    """The example app at its URL, its upstream dripping an event every ``drip`` seconds."""
    example = load_example("relay_app")
    with ServerThread(profile="openai", faults=f"drip={drip}") as upstream:
        app = example.make_app(MemoryReplyLog(), upstream.base_url)
        with serve_app(app) as port:
            yield f"http://127.0.0.1:{port}/", upstream


@pytest.fixture
def app_server() -> Iterator[tuple[str, ServerThread]]:
    with app_with_upstream(0.003) as served:
        yield served


@pytest.fixture
def slow_app_server() -> Iterator[tuple[str, ServerThread]]:
    """The reply lasts 6 s: Stop, pressed after its first 30 characters, lands mid-reply
    however late a loaded machine delivers it (at a 3 ms drip the whole reply took 0.6 s
    and was sometimes all there before Stop reached the app)."""
    with app_with_upstream(0.03) as served:
        yield served


def expected_text() -> str:
    return expected_reply({
        "model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 200,
        "stream": True, "stream_options": {"include_usage": True},
    }).text


def test_page_reconnects_after_cuts_and_renders_the_exact_reply(
    app_server: tuple[str, ServerThread],
) -> None:
    base, _ = app_server
    title, text = rendered(chromium(base + f"?auto={PROMPT}&cut=4", "--dump-dom"))
    assert title == "ended: done"  # never TWICE
    assert text == expected_text()
    # A picture of the page after a reply (another one, cut every 7 events), kept.
    artifacts = Path(os.environ.get("FLUXSTREAM_ARTIFACTS", "/tmp/fluxstream-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "relay_page.png"
    chromium(base + f"?auto={PROMPT}&cut=7", f"--screenshot={shot}", "--window-size=900,700")
    assert shot.exists() and shot.stat().st_size > 1000


def test_page_reload_mid_reply_resumes(app_server: tuple[str, ServerThread]) -> None:
    base, _ = app_server
    title, text = rendered(chromium(base + f"?auto={PROMPT}&reload=40&cut=6", "--dump-dom"))
    assert title == "ended: done"
    assert text == expected_text()


def test_stop_button_ends_the_upstream(slow_app_server: tuple[str, ServerThread]) -> None:
    base, upstream = slow_app_server
    title, text = rendered(chromium(base + f"?auto={PROMPT}&stop=30", "--dump-dom"))
    assert title == "ended: cancelled"
    assert expected_text().startswith(text) and 30 <= len(text) < len(expected_text())
    record = upstream.records.find_disconnect(completed=False)
    assert record is not None  # the model's response was closed mid-reply
