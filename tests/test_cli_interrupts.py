"""Ctrl-C (SIGINT to the process) in ``capture`` keeps what was read; in ``serve`` it is the
normal way to stop the server."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_support import ENV, free_port, run_cli

from fluxstream.server import ServerThread


def test_ctrl_c_in_capture_keeps_what_was_read_marked_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "capture.json"
    with ServerThread(port=0, faults="stall=60,stall-after-events=3") as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fluxstream", "capture", "--base-url", srv.base_url,
             "--model", "m", "-o", str(out), "stop me"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        )
        try:
            deadline = time.monotonic() + 60
            while not srv.records.requests and time.monotonic() < deadline:
                time.sleep(0.02)
            assert srv.records.requests, "the capture never sent its request"
            # The server wrote 3 events and stalls; give the client a moment to read them
            # (nothing the client does is visible from here before the interrupt).
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
        record_of_close = srv.records.wait_disconnect_sync(timeout=5.0)
    assert proc.returncode == 4, stdout + stderr  # cancelled
    assert "Traceback" not in stdout + stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("fluxstream: interrupted; captured ") and str(out) in line
    record = json.loads(out.read_text())
    assert record["interrupted"] is True and record["status"] == 200
    assert record["error"]["type"] == "KeyboardInterrupt"
    body = b"".join(base64.b64decode(r["b64"]) for r in record["reads"])
    assert body.count(b"data: {") >= 1  # what arrived of the 3 events before the stall
    assert len(body) <= record_of_close.bytes_written
    assert record_of_close.completed is False

    replayed = run_cli("replay", str(out))
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr  # truncated
    assert "recorded break: interrupted (Ctrl-C)" in replayed.stdout


def test_ctrl_c_in_serve_is_a_normal_stop() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fluxstream", "serve", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )
    try:
        assert proc.stdout is not None
        assert f"127.0.0.1:{port}" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert stdout.strip() == "fluxstream server stopped"
    assert stderr == ""
