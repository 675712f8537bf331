"""Ctrl-C (SIGINT to the process) in ``capture`` keeps what was read; in ``serve`` it is the
normal way to stop the server."""

from __future__ import annotations

import base64
import json
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_support import free_port, run_cli, start_cli
from sse_frames import chat_choice, chat_frame


def _event(text: str) -> bytes:
    return chat_frame(chat_choice(text, with_finish=True), id="c1", typed=True)


#: What the stalling server sends before it stalls: a head, then three events.
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
EVENTS = _event("Hel") + _event("lo, ") + _event("wor")


def _queues(local: int, remote: int) -> tuple[int, int] | None:
    """(send queue, receive queue) in bytes of the TCP connection from port ``local`` to port
    ``remote`` on 127.0.0.1, as the kernel reports it (Linux's /proc/net/tcp), or ``None``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        ports = (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16))
        if ports == (local, remote):
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    return None


@contextmanager
def stalling_server() -> Iterator[tuple[str, queue.Queue[tuple[int, int]]]]:
    """A server that answers the first request with :data:`HEAD` and :data:`EVENTS` and then
    sends nothing more until the test ends; puts (its port, the client's port) on the queue
    once it has sent them."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    sent: queue.Queue[tuple[int, int]] = queue.Queue()
    done = threading.Event()

    def serve() -> None:
        conn, peer = listener.accept()
        with conn:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            conn.sendall(HEAD + EVENTS)
            sent.put((port, peer[1]))
            done.wait(120)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1", sent
    finally:
        done.set()
        listener.close()
        thread.join(timeout=10)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_ctrl_c_in_capture_keeps_what_was_read_marked_interrupted(tmp_path: Path) -> None:
    """The interrupt comes once the kernel says every byte the server sent was taken by the
    client (its receive queue empty), not after a guessed sleep: the capture must then hold
    exactly those bytes."""
    out = tmp_path / "capture.json"
    with stalling_server() as (base_url, sent):
        proc = start_cli("capture", "--base-url", base_url, "--model", "m", "-o", str(out),
                         "stop me")
        try:
            server_port, client_port = sent.get(timeout=60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                server_side = _queues(server_port, client_port)
                client_side = _queues(client_port, server_port)
                if server_side and client_side and server_side[0] == 0 == client_side[1]:
                    break
                time.sleep(0.01)  # polling the kernel's counters, not waiting for luck
            else:
                raise AssertionError("the capture never read what the server sent")
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 4, stdout + stderr  # cancelled
    assert "Traceback" not in stdout + stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("fluxstream: interrupted; captured ") and str(out) in line
    record = json.loads(out.read_text())
    assert record["interrupted"] is True and record["status"] == 200
    assert record["error"]["type"] == "KeyboardInterrupt"
    assert b"".join(base64.b64decode(r["b64"]) for r in record["reads"]) == EVENTS

    replayed = run_cli("replay", str(out))
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr  # truncated
    assert "Hello, wor" in replayed.stdout
    assert "recorded break: interrupted (Ctrl-C)" in replayed.stdout


@pytest.mark.parametrize(
    ("stop", "suite_sigint"),
    [(signal.SIGINT, "default"), (signal.SIGINT, "ignored"), (signal.SIGTERM, "default")],
    ids=["ctrl-c", "ctrl-c-suite-ignoring-sigint", "sigterm"],
)
def test_ctrl_c_or_sigterm_in_serve_is_a_normal_stop(
    stop: signal.Signals, suite_sigint: str
) -> None:
    """``ignored``: the suite runs as a background job (``pytest &`` in a script), with
    SIGINT ignored, which its children inherit; the CLI is started as a terminal starts it
    (``start_cli``), so the Ctrl-C tests test the CLI, not how the suite was launched.
    SIGTERM is what a process manager sends (systemd, docker stop, kill): the same clean
    stop as Ctrl-C, not a death by signal (exit -15 and nothing said)."""
    wanted = signal.SIG_IGN if suite_sigint == "ignored" else signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGINT, wanted)
    try:
        port = free_port()
        proc = start_cli("serve", "--port", str(port))
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert proc.stdout is not None
        assert f"127.0.0.1:{port}" in proc.stdout.readline()  # listening: the handlers are set
        proc.send_signal(stop)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert stdout.strip() == "fluxstream server stopped"
    assert stderr == ""


def test_serve_on_a_busy_port_is_one_line_naming_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_cli("serve", "--port", str(port))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("fluxstream: cannot listen on 127.0.0.1:") and f":{port}" in line
    assert "in use" in line and "--port" in line
