"""Every use of aiohttp's internals is in one module, which refuses an aiohttp it does not fit.

``fluxstream/_io/aiohttp_private.py`` checks on import that the parts of aiohttp it uses are
there (classes, methods with the parameters passed, attributes); an aiohttp without one is
refused with a typed ``ImportError`` naming it, the versions supported and
``transport="httpx"``; ``transport="auto"`` then runs on httpx with one warning. These tests
take a part away (monkeypatch) and import the fence afresh; the modules as they were are put
back afterwards. Also: the range the fence states is the one ``pyproject.toml`` pins, no other
module reaches into aiohttp, and an aiohttp whose ``ClientSession`` has no ``max_headers``
(3.10-3.12) runs.
"""

from __future__ import annotations

import ast
import importlib
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.client_proto
import aiohttp.streams
import httpx
import pytest

import fluxstream
import fluxstream._io
from fluxstream._io import default_client
from fluxstream._io.http_library import UnsupportedTransport

pytestmark = pytest.mark.auto_transport  # transport="auto" itself: never forced to httpx
#: The adapter runs on asyncio only.
on_asyncio = pytest.mark.parametrize("anyio_backend", ["asyncio"])

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fluxstream"
FENCE = "fluxstream._io.aiohttp_private"
#: The fence and what imports it, imported afresh by these tests (and put back after).
ADAPTER = (FENCE, "fluxstream._io.aiohttp_errors", "fluxstream._io.aiohttp_client")
MSG = [{"role": "user", "content": "Stream me a reply about the fence"}]


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Any]]:
    """Imports a module of the adapter afresh (after a part of aiohttp was changed); the
    modules as they were come back when the test ends."""
    for name in ADAPTER:
        monkeypatch.delitem(sys.modules, name, raising=False)
        attribute = name.rpartition(".")[2]
        if hasattr(fluxstream._io, attribute):
            monkeypatch.setattr(fluxstream._io, attribute, getattr(fluxstream._io, attribute))
    monkeypatch.setattr(default_client, "_warned_unsupported", False)
    yield importlib.import_module


#: Parts of aiohttp the fence uses, each taken away in turn: (owner, attribute, named as).
PARTS: list[tuple[Any, str, str]] = [
    (aiohttp.client_proto.ResponseHandler, "set_response_params",
     "aiohttp.client_proto.ResponseHandler.set_response_params"),
    (aiohttp.client_proto.ResponseHandler, "read_timeout",
     "aiohttp.client_proto.ResponseHandler.read_timeout (settable)"),
    (aiohttp.TCPConnector, "_release", "aiohttp.connector.TCPConnector._release"),
    (aiohttp.streams.StreamReader, "_read_nowait", "aiohttp.streams.StreamReader._read_nowait"),
    (aiohttp, "SocketTimeoutError", "aiohttp.SocketTimeoutError"),
]


def _owner_of(owner: Any, name: str) -> Any:
    """The class in ``owner``'s MRO that defines ``name`` (where it must be taken away)."""
    if not isinstance(owner, type):
        return owner
    return next(klass for klass in owner.__mro__ if name in vars(klass))


@pytest.mark.parametrize(("owner", "name", "named"), PARTS, ids=[p[2] for p in PARTS])
def test_the_fence_refuses_an_aiohttp_without_a_part_it_uses(
    owner: Any, name: str, named: str, monkeypatch: pytest.MonkeyPatch,
    fresh: Callable[[str], Any],
) -> None:
    monkeypatch.delattr(_owner_of(owner, name), name)
    with pytest.raises(UnsupportedTransport) as caught:
        fresh(FENCE)
    message = str(caught.value)
    assert isinstance(caught.value, ImportError)
    assert named in message
    assert f"aiohttp {aiohttp.__version__}" in message
    assert ">=3.10.11,<3.15" in message and 'transport="httpx"' in message


def _release_without_should_close(self: Any, key: Any, protocol: Any) -> None:
    pass


def _get_not_awaited(self: Any, key: Any, traces: Any) -> None:
    return None


_HANDLER_INIT = aiohttp.client_proto.ResponseHandler.__init__


def _handler_init_naming_no_payload(self: Any, loop: Any) -> None:
    _HANDLER_INIT(self, loop)  # what aiohttp sets, under names its code no longer shows


#: Parts still there but changed: (owner, attribute, its replacement, named as).
CHANGED = [
    pytest.param(aiohttp.connector.BaseConnector, "_release", _release_without_should_close,
                 "aiohttp.connector.TCPConnector._release(key, protocol, should_close)",
                 id="a parameter passed is gone"),
    # aiohttp before 3.10.11 (3.10.6 at least) called ``_get`` without awaiting it: the
    # subclass's coroutine would be taken for a connection.
    pytest.param(aiohttp.connector.BaseConnector, "_get", _get_not_awaited,
                 "aiohttp.connector.TCPConnector._get (a coroutine function)",
                 id="a coroutine no longer awaited"),
    # The body under a response, read by the protocol subclass, renamed.
    pytest.param(aiohttp.client_proto.ResponseHandler, "__init__",
                 _handler_init_naming_no_payload,
                 "aiohttp.client_proto.ResponseHandler._payload",
                 id="an instance attribute renamed"),
]


@pytest.mark.parametrize(("owner", "name", "replacement", "named"), CHANGED)
def test_the_fence_refuses_a_part_that_changed(
    owner: type, name: str, replacement: Any, named: str, monkeypatch: pytest.MonkeyPatch,
    fresh: Callable[[str], Any],
) -> None:
    assert "_payload" in _HANDLER_INIT.__code__.co_names  # what the check reads, unpatched
    monkeypatch.setattr(owner, name, replacement)
    with pytest.raises(UnsupportedTransport, match=re.escape(named)):
        fresh(FENCE)


def test_the_fence_refuses_an_aiohttp_without_a_private_module(
    monkeypatch: pytest.MonkeyPatch, fresh: Callable[[str], Any]
) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp.http_exceptions", None)  # import fails
    with pytest.raises(UnsupportedTransport, match=re.escape("aiohttp.http_exceptions")):
        fresh(FENCE)


@pytest.mark.anyio
@on_asyncio
async def test_transport_aiohttp_raises_the_refusal_and_auto_runs_on_httpx_warning_once(
    server: Any, monkeypatch: pytest.MonkeyPatch, fresh: Callable[[str], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delattr(aiohttp.streams.StreamReader, "_read_nowait")
    with pytest.raises(UnsupportedTransport, match=re.escape('transport="httpx"')):
        fluxstream.AsyncClient(server.base_url, "sk-fence", transport="aiohttp")
    with caplog.at_level(logging.WARNING, logger="fluxstream"):
        for _ in range(2):
            async with fluxstream.AsyncClient(server.base_url, "sk-fence",
                                              transport="auto") as client:
                assert not client.http_client.uses_aiohttp
                request = client.http_client.build_request("GET", f"{server.base_url}/x")
                assert isinstance(request, httpx.Request)
                reply = await client.chat.complete(model="m", messages=MSG)
                assert reply.outcome == "done" and reply.text
    warnings = [r for r in caplog.records if "runs on httpx" in r.getMessage()]
    assert len(warnings) == 1  # said once, not per client
    assert "aiohttp.streams.StreamReader._read_nowait" in warnings[0].getMessage()


@pytest.mark.anyio
@on_asyncio
async def test_an_aiohttp_session_without_max_headers_runs(
    server: Any, monkeypatch: pytest.MonkeyPatch, fresh: Callable[[str], Any]
) -> None:
    """aiohttp 3.10-3.12 (which ``pyproject.toml`` allows) has no ``max_headers`` option, and
    no limit on the number of header lines: the adapter must not pass it there."""
    original = aiohttp.ClientSession.__init__

    def before_3_13(
        self: Any, *, connector: Any = None, trust_env: bool = False,
        max_line_size: int = 8190, max_field_size: int = 8190,
    ) -> None:
        original(self, connector=connector, trust_env=trust_env,
                 max_line_size=max_line_size, max_field_size=max_field_size)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", before_3_13)
    adapter = fresh("fluxstream._io.aiohttp_client")
    http = adapter.AiohttpClient(timeout=httpx.Timeout(5.0), limits=httpx.Limits())
    try:
        body = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
        request = http.build_request("POST", f"{server.base_url}/chat/completions",
                                     content=body, headers={"content-type": "application/json"})
        response = await http.send(request, stream=True)
        data = await response.aread()
        assert response.status_code == 200 and data.rstrip().endswith(b"data: [DONE]")
    finally:
        await http.aclose()


def test_the_supported_range_is_the_one_pyproject_pins() -> None:
    from fluxstream._io.aiohttp_private import SUPPORTED

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    # The dependency and the ``aiohttp`` extra.
    assert re.findall(r'"(aiohttp[<>=!~][^"]*)"', pyproject) == [f"aiohttp{SUPPORTED}"] * 2


def _aiohttp_reaches(source: str) -> list[str]:
    """What ``source`` takes of aiohttp beyond its top-level names: a module under it imported,
    a module under it named as an attribute, or a class of it subclassed."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("aiohttp.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiohttp."):
            found.append(node.module or "")
        elif (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "aiohttp" and node.attr[:1].islower()
        ):
            found.append(f"aiohttp.{node.attr}")
        elif isinstance(node, ast.ClassDef):
            found += [
                f"class {node.name}({ast.unparse(base)})" for base in node.bases
                if ast.unparse(base).startswith("aiohttp.")
            ]
    return found


def test_no_module_but_the_fence_reaches_into_aiohttp() -> None:
    reaching = {
        str(path.relative_to(ROOT)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := _aiohttp_reaches(path.read_text(encoding="utf-8")))
    }
    assert set(reaching) == {"fluxstream/_io/aiohttp_private.py"}, reaching


def test_the_check_itself_sees_a_private_import() -> None:
    """The scan above would notice the imports the adapter had before the fence."""
    source = (
        "import aiohttp.compression_utils as c\n"
        "from aiohttp.client_proto import ResponseHandler\n"
        "class H(aiohttp.TCPConnector): pass\n"
        "x = aiohttp.connector.Connection\n"
    )
    assert sorted(_aiohttp_reaches(source)) == [
        "aiohttp.client_proto", "aiohttp.compression_utils", "aiohttp.connector",
        "class H(aiohttp.TCPConnector)",
    ]
    assert _aiohttp_reaches("import aiohttp\nfrom aiohttp import ClientSession\n"
                            "x = aiohttp.ClientTimeout\n") == []
