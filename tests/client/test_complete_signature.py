"""``complete`` of every endpoint takes exactly its ``stream``'s parameters (one definition,
``endpoints.completing``), so the two cannot drift apart and help() shows the real ones."""

from __future__ import annotations

import inspect

import pytest

import fluxstream
from fluxstream._reply import Reply


@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
def test_complete_has_the_parameters_of_stream(endpoint: str) -> None:
    client = fluxstream.AsyncClient(base_url="http://127.0.0.1:9/v1", api_key="sk-x")
    api = getattr(client, endpoint)
    stream = inspect.signature(api.stream)
    complete = inspect.signature(api.complete)
    assert list(complete.parameters.values()) == list(stream.parameters.values())
    assert complete.return_annotation in (Reply, "Reply")
    assert api.complete.__qualname__.endswith(".complete")
    assert "whole reply" in (api.complete.__doc__ or "")
