"""The example relay app (``examples/relay_app.py``) refuses what a page may send that it
cannot serve: a body that is not JSON or not an object, and ``max_tokens`` that is not a number
or is out of range, each a 400 before any upstream request (it was a 500, and any
``max_tokens`` went upstream)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from fluxstream.relay import MemoryReplyLog

ROOT = Path(__file__).resolve().parents[2]


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("relay_app", ROOT / "examples" / "relay_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'{"max_tokens": "many"}', b'{"max_tokens": 1000000000}',
     b'{"max_tokens": 0}', b"[" * 100_000],
    ids=["not-json", "not-an-object", "not-a-number", "too-many", "zero", "deep"],
)
def test_a_bad_request_from_the_page_is_a_400(body: bytes) -> None:
    testclient = pytest.importorskip("starlette.testclient")
    example = load_example()
    upstream = "http://127.0.0.1:9/v1"  # nothing listens: a request that went out would fail
    with testclient.TestClient(example.make_app(MemoryReplyLog(), upstream)) as client:
        response = client.post("/replies", content=body)
    assert response.status_code == 400, response.text
    assert "error" in response.json()
