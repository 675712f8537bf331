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

import html
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from relay_support import free_port

from fluxstream.relay import MemoryReplyLog
from fluxstream.server import ServerThread, expected_reply

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[2]
PROMPT = "browser"

if CHROMIUM is None and os.environ.get("FLUXSTREAM_REQUIRE_BROWSER") == "1":
    # CI installs Debian's chromium (.ci/run): there a missing browser is a failure, not a skip.
    raise RuntimeError("FLUXSTREAM_REQUIRE_BROWSER=1 but chromium is not installed")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("relay_app", ROOT / "examples" / "relay_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def app_server() -> Iterator[tuple[str, ServerThread]]:
    uvicorn = pytest.importorskip("uvicorn")
    example = load_example()
    with ServerThread(profile="openai", faults="drip=0.003") as upstream:
        port = free_port()
        app = example.make_app(MemoryReplyLog(), upstream.base_url)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        try:
            yield f"http://127.0.0.1:{port}/", upstream
        finally:
            server.should_exit = True
            thread.join(10)


def chromium(url: str, *options: str) -> str:
    """The browser's stdout for ``url``. A profile directory of its own per run, so browsers
    started at once by two xdist workers never share one (nor its lock)."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="fluxstream-chromium-") as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--user-data-dir={profile}", "--virtual-time-budget=20000", *options, url],
            capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
        )
    return result.stdout


def rendered(dom: str) -> tuple[str, str]:
    """(title, the text of #out) of a dumped DOM."""
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    out = re.search(r'<div id="out">(.*?)</div>', dom, re.S)
    assert title and out, dom[:500]
    return html.unescape(title.group(1)), html.unescape(out.group(1))


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


def test_stop_button_ends_the_upstream(app_server: tuple[str, ServerThread]) -> None:
    base, upstream = app_server
    title, text = rendered(chromium(base + f"?auto={PROMPT}&stop=30", "--dump-dom"))
    assert title == "ended: cancelled"
    assert expected_text().startswith(text) and 30 <= len(text) < len(expected_text())
    record = upstream.records.find_disconnect(completed=False)
    assert record is not None  # the model's response was closed mid-reply
