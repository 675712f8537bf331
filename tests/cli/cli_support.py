"""Running the ``fluxstream`` command as a user types it: a subprocess on 127.0.0.1 only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: Unbuffered so a killed process still shows what it printed; no colour codes in assertions.
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
for _name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
              *_PROXIES, *(p.lower() for p in _PROXIES)):
    ENV.pop(_name, None)  # a developer's own settings must not steer a test


def run_cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fluxstream", *args],
        capture_output=True, text=True, timeout=timeout, env=env or ENV,
        stdin=subprocess.DEVNULL,
    )


def _interruptible() -> None:
    # Runs in the child before exec: a suite started as a background job (``pytest &`` from a
    # script, nohup, some CI runners) has SIGINT ignored, every child inherits that, and
    # Python then installs no KeyboardInterrupt handler: a Ctrl-C test would wait on a
    # process that cannot be interrupted. The user at a terminal has it at its default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(*args: str) -> subprocess.Popen[str]:
    """``fluxstream <args>`` started as a user at a terminal starts it, to be interrupted
    (``proc.send_signal(signal.SIGINT)``) as Ctrl-C does: output piped, text."""
    return subprocess.Popen(
        [sys.executable, "-m", "fluxstream", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        stdin=subprocess.DEVNULL, preexec_fn=_interruptible,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@dataclass
class Canned:
    """A running :func:`canned_server`: its URL, and the request line of every request."""

    base_url: str
    requests: list[str] = field(default_factory=list)


@contextmanager
def canned_server(body: bytes, content_type: str = "text/event-stream") -> Iterator[Canned]:
    """A one-thread HTTP server on 127.0.0.1 that answers every request with ``body`` and
    closes: for bytes the embedded server would never send (a hostile server), or to see
    where a request went (as an HTTPS proxy it records the ``CONNECT`` line, then the TLS
    handshake fails)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 1 << 16:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            canned.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            rest = head.split(b"\r\n\r\n", 1)[1]
            while len(rest) < length:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                rest += chunk
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type.encode() + b"\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
                + body
            )

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            answer(conn)

    canned = Canned(f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield canned
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
