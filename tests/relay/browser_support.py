"""Helpers of the browser tests: Debian's headless Chromium, an example app loaded from
``examples/`` and served by uvicorn in a thread of the test's process."""

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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[2]

if CHROMIUM is None and os.environ.get("FLUXSTREAM_REQUIRE_BROWSER") == "1":
    # CI installs Debian's chromium (.ci/run): there a missing browser is a failure, not a skip.
    raise RuntimeError("FLUXSTREAM_REQUIRE_BROWSER=1 but chromium is not installed")
#: The mark of a module whose tests need the browser.
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


def load_example(name: str) -> Any:
    """``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def serve_app(app: Any) -> Iterator[int]:
    """``app`` under uvicorn on a port of the OS's choosing, in a thread; yields the port."""
    uvicorn = pytest.importorskip("uvicorn")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    try:
        yield int(server.servers[0].sockets[0].getsockname()[1])
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
