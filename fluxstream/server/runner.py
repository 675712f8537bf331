"""Ways to run the server: forever (the CLI), blocking, or in a background thread.

:class:`ServerThread` exists for synchronous code (the CLI demo, sync tests) and for clients on
another event loop: the server gets its own loop in a daemon thread and the records are shared,
because they only ever grow by appends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from .app import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    Server,
    serve,
)
from .plan import RequestPlan
from .records import DisconnectRecord, DisconnectWaits, Records

__all__ = ["ServerThread", "run", "run_forever"]


async def run_forever(
    host: str = "127.0.0.1",
    port: int = 8787,
    profile: str | None = "openai",
    api_key: str | None = None,
    ready: Callable[[str], None] | None = None,
    *,
    faults: str | Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> None:
    """Serve until cancelled (the ``fluxstream serve`` command); ``ready(base_url)`` once bound.
    Nothing can read its records, so it keeps none (they would grow with every request).
    ``max_body_bytes``/``max_connections``: see :func:`~.app.serve`."""
    async with serve(
        host, port, profile, api_key, faults=faults, record_limit=0,
        max_body_bytes=max_body_bytes, max_connections=max_connections,
    ) as server:
        if ready is not None:
            ready(server.base_url)
        await anyio.sleep_forever()


def run(
    host: str = "127.0.0.1",
    port: int = 8787,
    profile: str | None = "openai",
    api_key: str | None = None,
    ready: Callable[[str], None] | None = None,
    *,
    faults: str | Mapping[str, str] | None = None,
    backend: str = "asyncio",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> None:
    """Blocking :func:`run_forever` on a new event loop; returns on KeyboardInterrupt."""

    async def main() -> None:
        await run_forever(
            host, port, profile, api_key, ready, faults=faults,
            max_body_bytes=max_body_bytes, max_connections=max_connections,
        )

    with suppress(KeyboardInterrupt):
        anyio.run(main, backend=backend)


class ServerThread(DisconnectWaits):
    """The server on its own event loop in a background thread, for sync code and other loops.

    ::

        with ServerThread(profile="azure") as server:
            httpx.post(server.base_url + "/chat/completions", json=...)

    The records are shared with the test thread; :meth:`wait_disconnect` can be awaited from
    any event loop (it polls) and :meth:`wait_disconnect_sync` blocks.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        profile: str | None = "openai",
        api_key: str | None = None,
        *,
        faults: str | Mapping[str, str] | None = None,
        backend: str = "asyncio",
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        plan: RequestPlan | None = None,
    ) -> None:
        self._options: dict[str, Any] = {
            "plan": plan,
            "host": host,
            "port": port,
            "profile": profile,
            "api_key": api_key,
            "faults": faults,
            "idle_timeout": idle_timeout,
            "max_body_bytes": max_body_bytes,
            "max_connections": max_connections,
        }
        self._backend = backend
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        self._scope: anyio.CancelScope | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._error: BaseException | None = None

    @property
    def server(self) -> Server:
        """The running :class:`~.app.Server` (``RuntimeError`` before :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the server thread is not running")
        return self._server

    @property
    def port(self) -> int:
        """The port the server listens on (the free one picked for ``port=0``)."""
        return self.server.port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return self.server.url

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI-style client takes as ``base_url``."""
        return self.server.base_url

    @property
    def records(self) -> Records:
        """The server's records, shared with this thread (they only grow by appends)."""
        return self.server.records

    def find_disconnect(
        self, *, request: int | None = None, completed: bool | None = None
    ) -> DisconnectRecord | None:
        """The first disconnect recorded that matches (see :meth:`Records.find_disconnect`)."""
        return self.records.find_disconnect(request=request, completed=completed)

    def start(self, timeout: float = 10.0) -> ServerThread:
        """Start the thread and wait until the server listens (re-raises a startup error)."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name="fluxstream-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the fluxstream server thread did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the server (closing every connection) and join the thread."""
        thread, scope, token = self._thread, self._scope, self._token
        if thread is None:
            return
        if scope is not None and token is not None and thread.is_alive():
            with suppress(RuntimeError):  # the loop may have finished already
                anyio.from_thread.run_sync(scope.cancel, token=token)
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend=self._backend)
        except BaseException as exc:  # reported to start()
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with serve(**self._options) as server:
            self._server = server
            self._token = anyio.lowlevel.current_token()
            with anyio.CancelScope() as scope:
                self._scope = scope
                self._ready.set()
                await anyio.sleep_forever()
