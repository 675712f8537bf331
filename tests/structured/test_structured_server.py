"""Structured output end to end over real sockets: the client, the embedded server (which
builds tool arguments from the tool's JSON schema) and StructuredTracker, on asyncio and trio.

The server answers a ``response_format`` schema with schema-shaped JSON content; its
``ignore-schema`` profile answers plain text instead, the "model answered with text that is
not JSON" case.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import fluxstream
from fluxstream.errors import ParseError
from fluxstream.structured import StructuredTracker, response_format, strict_json_schema

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Weather in Zürich?"}]


class Forecast(BaseModel):
    city: str
    days: int
    unit: Literal["C", "F"]
    notes: list[str]


TOOLS = [{"type": "function", "function": {
    "name": "forecast", "parameters": strict_json_schema(Forecast), "strict": True}}]


async def _run(server: Any, tracker: StructuredTracker, **params: Any) -> tuple[list[Any], Any]:
    dumps: list[Any] = []
    async with fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-local") as client:
        async with client.chat.stream(model="m", messages=USER, **params) as stream:
            async for event in stream:
                changed = tracker.feed(event)
                if changed is not None and changed.value is not None:
                    dumps.append(changed.value.model_dump(exclude_unset=True))
        return dumps, stream.reply


async def test_tool_arguments_stream_as_typed_partials(aserver: Any) -> None:
    tracker = StructuredTracker(tools={"forecast": Forecast})
    dumps, reply = await _run(aserver, tracker, tools=TOOLS)
    call = reply.choices[0].tool_calls[0]
    final = call.parse_arguments(Forecast)
    result = tracker.call_result(0, 0)
    assert result.complete and result.value == final
    assert len(dumps) > 2 and dumps[-1] == final.model_dump()
    for before, after in itertools.pairwise(dumps):  # fields only ever get added
        assert set(before) <= set(after)
        assert all(after[k] == v for k, v in before.items() if k in ("days", "unit"))


async def test_tool_arguments_cut_by_the_network_are_a_stated_partial(aserver: Any) -> None:
    tracker = StructuredTracker(tools={"forecast": Forecast})
    _, reply = await _run(aserver, tracker, tools=TOOLS,
                          extra_headers={"X-Fluxstream-Fault": "drop-after-events=6"},
                          resume=fluxstream.ResumePolicy(max_resumes=0))
    assert reply.outcome is fluxstream.Outcome.TRUNCATED
    result = tracker.call_result(0, 0)
    assert not result.complete and result.reason == "truncated"
    assert result.text == reply.choices[0].tool_calls[0].arguments
    assert result.value is not None and result.value.model_fields_set == {"city", "days"}
    assert result.value.city == "Zürich" and result.value.days == 1


async def test_text_that_is_not_json_is_a_parse_error_not_a_crash(aserver: Any) -> None:
    tracker = StructuredTracker(Forecast)
    # The server answers a schema with schema-shaped JSON; this profile makes it ignore the
    # schema and answer plain text, as a model that disregards response_format would.
    dumps, reply = await _run(
        aserver,
        tracker,
        response_format=response_format(Forecast),
        extra_headers={"X-Fluxstream-Profile": "ignore-schema"},
    )
    assert dumps == [] and reply.outcome is fluxstream.Outcome.DONE
    with pytest.raises(ParseError) as info:
        tracker.result()
    assert info.value.reason == "invalid_json" and info.value.text == reply.text
