"""Run llama.cpp's own HTTP server (the ``xllamacpp`` wheel) until SIGTERM/SIGINT.

The server lives inside the Python process that creates it, so the integration fixture starts
this file in a subprocess and stops it by pid. Usage::

    python llama_server.py MODEL.gguf PORT [--n-parallel N] [--n-ctx N] [--n-predict N]

Greedy sampling is the server's default (temperature 0, a fixed seed), so a request that sets
no sampling parameters -- ``fluxstream capture`` sends none -- is reproducible and can be
compared with a live stream. If ``xllamacpp`` cannot be imported here (no wheel for this
platform, a missing system library), the process prints ``IMPORT-ERROR: ...`` and exits with
status 3, so the fixture can skip with that reason instead of failing.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LlamaServer:
    """A running llama.cpp server, as the test fixture hands it out: where it listens and
    where it logs."""

    base_url: str  # ".../v1", for fluxstream and openai-python
    root_url: str  # without "/v1": /health, /slots, /metrics
    log_path: Path
    pid: int
    slot_ctx: int
    n_predict: int

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("port", type=int)
    parser.add_argument("--n-parallel", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--n-predict", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    try:
        import xllamacpp
    except ImportError as exc:  # the wheel is missing or does not load on this platform
        sys.stdout.write(f"IMPORT-ERROR: {exc!r}\n")
        return 3

    stop = {signal.SIGTERM, signal.SIGINT}
    if hasattr(signal, "pthread_sigmask"):
        # Block the stop signals before the server's threads start, so every thread inherits
        # the mask and sigwait() below is the one place they are taken.
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.n_ctx
    params.n_parallel = args.n_parallel
    # A default length for requests that set none (the CLI's capture sets none): bounded time.
    params.n_predict = args.n_predict
    params.sampling.temp = 0.0
    params.sampling.seed = 7
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.sse_ping_interval = 1  # ": ping"-style comments every second while streaming
    params.use_jinja = True
    params.endpoint_slots = True
    params.endpoint_metrics = True
    server = xllamacpp.Server(params)
    sys.stdout.write(f"llama-server ready on 127.0.0.1:{args.port}\n")
    sys.stdout.flush()
    if hasattr(signal, "sigwait"):
        signal.sigwait(stop)
    else:  # Windows: no signal masks; handlers run in the main thread
        stopped = threading.Event()
        for signum in stop:
            signal.signal(signum, lambda *_: stopped.set())
        while not stopped.wait(0.5):
            pass
    del server
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
