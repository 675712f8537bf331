"""Structured output across a resume token: ``resume(token, response_format=Model)``.

A token carries the request's schema but not the Python type, so a worker that continues a
stream names the type again; ``objects()`` and ``parsed`` then go on from the partial object
that the token's partial reply holds, for all three formats, over 127.0.0.1 on asyncio and
trio. (Before, ``resume`` took no ``response_format``: a resumed stream had no ``parsed``.)
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import fluxstream
from fluxstream.server import Server

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Plan a day in Zürich"}]
#: Event ids on every format, so the resume goes by ``Last-Event-ID``.
IDS = {"X-Fluxstream-Profile": "sse-ids"}


class Stop(BaseModel):
    place: str
    minutes: int


class Plan(BaseModel):
    title: str
    city: str
    stops: list[Stop]
    tags: list[str]


def endpoint(client: fluxstream.AsyncClient, api: str) -> Any:
    return {"chat": client.chat, "responses": client.responses, "messages": client.messages}[api]


def request(api: str) -> dict[str, Any]:
    if api == "chat":
        return {"model": "m", "messages": USER}
    if api == "responses":
        return {"model": "m", "input": USER}
    return {"model": "m", "max_tokens": 1024, "messages": USER}


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_resumed_stream_goes_on_from_the_partial_object(aserver: Server, api: str) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk-s") as client:
        async with endpoint(client, api).stream(
            **request(api), response_format=Plan, extra_headers=IDS
        ) as whole:
            await whole.until_done()
        expected = whole.parsed.value
        assert whole.parsed.complete and expected is not None

        async with endpoint(client, api).stream(
            **request(api), response_format=Plan, extra_headers=IDS
        ) as first:
            partial = None
            async for obj in first.objects():
                partial = obj
                if "stops" in obj.model_fields_set:  # well into the object
                    break
            token = first.resume_token()
        assert partial is not None and partial.title == expected.title

        resumed = client.chat.resume(token, response_format=Plan, extra_headers=IDS)
        async with resumed:
            objects = [obj async for obj in resumed.objects()]
        assert resumed.reply.outcome is fluxstream.Outcome.DONE
        assert resumed.parsed.complete and resumed.parsed.value == expected
        # Every object after the resume already holds what came before it.
        assert objects and all(obj.title == expected.title for obj in objects)
        assert objects[-1] == expected


async def test_a_resume_without_the_type_has_no_parsed_object(aserver: Server) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk-s") as client:
        async with client.chat.stream(**request("chat"), response_format=Plan) as first:
            async for _event in first:
                break
            token = first.resume_token()
        async with client.chat.resume(token) as resumed:
            await resumed.until_done()
        assert resumed.reply.outcome is fluxstream.Outcome.DONE
        with pytest.raises(LookupError):
            _ = resumed.parsed
