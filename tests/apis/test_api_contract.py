"""The contract every registered API keeps, run for each of ``fluxstream.apis.registered()``.

Registering an API (``fluxstream/apis/<name>.py`` and the registry's list) is what puts it
through these tests: its recorded streams replay (found by the ``format`` their expectation
names), a resume token of its stream goes through JSON and resumes on its own endpoint, a drop
is continued with the API's own continuation body, and ``response_format=Model`` is asked for
and read back, and a request translated into every other registered API and back (what
failover sends) keeps its text turns, system prompt, function tools and length cap. The live
parts run against the embedded server, whose dialects carry the same names.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from fixture_files import GEMINI, api_streams, require
from format_corpus import check_reply, expected, reads
from gemini_corpus import check as check_gemini
from pydantic import BaseModel

import fluxstream
from fluxstream import apis
from fluxstream._parser import replay
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.apis import Api, Structured
from fluxstream.apis.portable import convert_body
from fluxstream.formats import FORMATS
from fluxstream.server import ServerThread

APIS = apis.registered()
IDS = [api.name for api in APIS]
USER = [{"role": "user", "content": "hello there"}]
#: How a resumed stream may end: a token can be ahead of the events delivered, and one that
#: already holds the finish resumes to the rest of the bytes only, without the end marker.
ENDED = (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED)
FIXTURES = [(api, path) for api in APIS for path in api_streams(api.name)]
PAIRS = [(x, y) for x in APIS for y in APIS if x is not y]
SYSTEM = "be brief"
TURNS = [("user", "hello there friend"), ("assistant", "hi!"), ("user", "tell me more")]
TOOL = {"name": "get_weather", "description": "the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}


class Plan(BaseModel):
    title: str
    city: str
    stops: list[str]


def arguments(api: Api, **fields: Any) -> dict[str, Any]:
    """The endpoint's ``stream`` arguments for :data:`USER` and ``fields``."""
    return api.prompt_arguments("m", list(USER), fields, include_usage=True)


def endpoint(client: fluxstream.AsyncClient, api: Api) -> Any:
    return getattr(client, api.endpoint)


# ------------------------------------------------------------------ identity


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_an_api_is_its_one_name_everywhere(api: Api) -> None:
    assert apis.get(api.name) is api
    assert api.format_class is FORMATS[api.name]
    assert api.path and api.path == api.path.strip("/")
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1")
    served = endpoint(client, api)
    assert callable(served.stream) and callable(served.resume) and callable(served.complete)


def test_names_and_paths_are_unique() -> None:
    assert len(set(IDS)) == len(IDS) == len(apis.names())
    assert len({api.path for api in APIS}) == len(APIS)
    assert len({api.endpoint for api in APIS}) == len(APIS)


# ------------------------------------------------------------------ a recorded stream


@pytest.mark.parametrize("mode", ["whole", "bytewise", "random-1"])
@pytest.mark.parametrize(("api", "path"), FIXTURES,
                         ids=[f"{api.name}-{path.stem}" for api, path in FIXTURES])
def test_every_recorded_stream_of_the_api_replays_exactly(api: Api, path: Path, mode: str) -> None:
    body = require(path).read_bytes()
    reply = replay(reads(body, mode), format=api.name)
    # Each corpus has its own field names (tests/fixtures/*/README.md).
    (check_gemini if path.parent == GEMINI else check_reply)(reply, expected(path))
    assert reply.bytes == len(body)


# ------------------------------------------------------------------ resume token


async def token_of(client: fluxstream.AsyncClient, api: Api) -> dict[str, Any]:
    """A real token, taken after the first content, through JSON (as a store keeps it)."""
    stream = endpoint(client, api).stream(**arguments(api, **{api.max_tokens_field: 12}))
    with anyio.fail_after(10):
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    break
            token = stream.resume_token()
    loaded: dict[str, Any] = json.loads(json.dumps(token))
    return loaded


@pytest.mark.anyio
@pytest.mark.parametrize("via", ["chat", "own"])
@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_a_resume_token_names_the_api_and_resumes_on_it(
    server: ServerThread, api: Api, via: str, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        direct = await endpoint(client, api).complete(
            **arguments(api, **{api.max_tokens_field: 12}))
        token = await token_of(client, api)
        assert token["api"] == api.name and apis.for_token(token) is api
        before = len(server.records.requests)
        resume = client.chat.resume if via == "chat" else endpoint(client, api).resume
        with anyio.fail_after(10):
            async with resume(token, resume=ResumePolicy(restart=True)) as stream:
                reply = await stream.complete()
    assert reply.text == direct.text and reply.outcome in ENDED
    posted = api.target(api.path, token["body"])[0].partition("?")[0]
    assert [r.path for r in server.records.requests[before:]] == [f"/v1/{posted}"]


# ------------------------------------------------------------------ continuation


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_continuation_body_appends_the_partial_answer_as_an_assistant_turn(api: Api) -> None:
    body = api.streaming_body("m", list(USER), {}, include_usage=True)
    kept = json.loads(json.dumps(body))
    flag = dict(api.continuation_flag if api.continuation_flag is not None else {"prefix": True})
    continued = api.continuation_body(body, "Hello, wor", flag)
    assert body == kept  # the original request is left as it was
    turns = continued[api.messages_field]
    assert turns[-1] == api.partial_turn("Hello, wor", flag)
    assert api.turn_text(turns[-1]) == "Hello, wor"
    assert turns[:-1] == body[api.messages_field]
    assert {k: v for k, v in continued.items() if k != api.messages_field} == {
        k: v for k, v in body.items() if k != api.messages_field}


@pytest.mark.anyio
@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_a_drop_is_continued_with_the_apis_own_continuation_body(
    server: ServerThread, api: Api, anyio_backend: str
) -> None:
    fields = arguments(api)
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        direct = await endpoint(client, api).complete(**fields)
        before = len(server.records.requests)
        headers = {"X-Fluxstream-Fault": "drop-after-events=12,fail-first=1",
                   "X-Fluxstream-Attempt-Key": f"contract-{api.name}-{anyio_backend}"}
        policy = ResumePolicy(continuation=True, last_event_id=False)
        with anyio.fail_after(20):
            async with endpoint(client, api).stream(
                **fields, extra_headers=headers, resume=policy
            ) as stream:
                reply = await stream.complete()
    assert reply.text == direct.text and stream.stats.resumes == 1
    first, second = (r.json for r in server.records.requests[before:])
    prefill = second[api.messages_field][-1]
    text = api.turn_text(prefill)
    assert text is not None and 0 < len(text) < len(direct.text)
    assert direct.text.startswith(text)
    flag = {k: v for k, v in prefill.items() if k not in api.partial_turn(text, {})}
    # A continuation asks for what is left of the length cap (in the API's own field), so
    # the body is the API's continuation of the first with that cap.
    cap, left = api.length_cap(first), api.length_cap(second)
    assert (cap is None) is (left is None)
    if cap is not None:
        assert left is not None and 0 < left < cap
        first = api.with_length_cap(first, left)
    assert second == api.continuation_body(first, text, flag)


# ------------------------------------------------------------------ structured output


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_structured_request_is_shaped_by_the_api(api: Api) -> None:
    body = api.conversation("m", list(USER), {})
    plain = dict(body)
    structured = api.structured_request(body, Plan)
    assert isinstance(structured, Structured) and structured.type is Plan
    assert body != plain  # the request now asks for the type
    assert api.structured(Plan) == structured  # what a resumed stream tracks
    assert api.structured({"type": "json_object"}) is None  # a provider dict: no type
    assert api.structured_request(dict(plain), None) is None


@pytest.mark.anyio
@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_response_format_model_is_read_back_as_the_model(
    server: ServerThread, api: Api, anyio_backend: str
) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        with anyio.fail_after(10):
            async with endpoint(client, api).stream(
                **arguments(api), response_format=Plan
            ) as stream:
                objects = [o async for o in stream.objects()]
    result = stream.parsed
    assert result.complete and isinstance(result.value, Plan)
    assert objects and objects[-1] == result.value
    sent = server.records.requests[-1].json
    body = api.streaming_body("m", list(USER), {}, include_usage=True)
    assert sent == {**sent, **api.target(api.path, body)[1], **_structured_fields(api)}


def _structured_fields(api: Api) -> dict[str, Any]:
    """The fields ``response_format=Plan`` adds to a request of ``api``."""
    body: dict[str, Any] = {}
    api.structured_request(body, Plan)
    return body


# ------------------------------------------------------------------ a request asked of another API


def portable_request(api: Api) -> dict[str, Any]:
    """A request of ``api`` made of what means the same in every API, through its own
    members: text turns, a system prompt, a function tool, a length cap, a temperature."""
    messages: list[dict[str, Any]] = [{"role": r, "content": t} for r, t in TURNS]
    fields: dict[str, Any] = {api.max_tokens_field: 77, **api.sampling({"temperature": 0.25})}
    system: list[dict[str, Any]] = []
    api.put_system(fields, system, SYSTEM)
    api.add_tools(fields, api.function_tools([TOOL]))
    return api.conversation("m", system + messages, fields)


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_an_api_reads_back_the_request_it_writes(api: Api) -> None:
    body = portable_request(api)
    turns = api.text_turns(body)
    assert [*([("system", SYSTEM)] if not api.system_of(body) else []), *TURNS] == turns
    assert api.system_of(body) in ("", SYSTEM)
    assert api.declared_functions(body) == [TOOL]
    assert api.request_settings(body)[api.max_tokens_field] == 77


@pytest.mark.parametrize(("x", "y"), PAIRS, ids=[f"{x.name}-{y.name}" for x, y in PAIRS])
def test_a_request_translated_to_another_api_and_back_asks_the_same(x: Api, y: Api) -> None:
    body = portable_request(x)
    kept = json.loads(json.dumps(body))
    there = convert_body(body, x, y)
    back = convert_body(there, y, x)
    assert body == kept  # the request itself is left as it was
    assert "stream" not in there and "stream" not in back
    assert x.system_of(back) == x.system_of(body)
    assert x.text_turns(back) == x.text_turns(body)
    assert x.declared_functions(back) == [TOOL]
    assert x.request_settings(back)[x.max_tokens_field] == 77
    assert back == body  # and nothing else was added or lost on the way


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_asking_for_usage_changes_nothing_else_and_overrules_no_one(api: Api) -> None:
    body = api.streaming_body("m", list(USER), {}, include_usage=False)
    asked = copy.deepcopy(body)
    api.ask_usage(asked)
    assert {k: v for k, v in asked.items() if k != "stream_options"} == {
        k: v for k, v in body.items() if k != "stream_options"}
    twice = copy.deepcopy(asked)
    api.ask_usage(twice)
    assert twice == asked
    declined = {**body, "stream_options": {"include_usage": False, "x": 1}}
    again = copy.deepcopy(declined)
    api.ask_usage(again)
    assert again == declined  # a request that declines usage is not overruled


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_trace_reads_the_cap_and_sampling_where_failover_reads_them(api: Api) -> None:
    """Both read :meth:`~fluxstream.apis.Api.request_settings`, under the API's own names."""
    assert api.max_tokens_field in api.parameter_fields("max_tokens")
    for shared, own in api.sampling_names.items():
        assert own in api.parameter_fields(shared), shared
    assert set(api.parameter_names) <= {"max_tokens", "temperature", "top_p", "top_k",
                                        "frequency_penalty", "presence_penalty", "seed",
                                        "stop", "n"}
