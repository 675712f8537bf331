"""The conventions' ``gen_ai.request.*`` parameters and ``gen_ai.output.type`` read from each
API's request body, in that API's own names: Chat Completions, Responses and Messages at the
top level, Gemini's in ``generationConfig`` (camelCase, as google-genai sends it, or
snake_case); and end to end, a Gemini reply's span carries them."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Telemetry
from opentelemetry.trace import SpanKind

import fluxstream
from fluxstream import apis
from fluxstream._core.genai_attributes import input_messages, read_request
from fluxstream.server import ServerThread


def request_attributes(body: dict[str, Any], api: str | None) -> dict[str, Any]:
    """What :func:`read_request` writes for ``body`` into a span's fresh attributes."""
    out: dict[str, Any] = {}
    read_request(body, api, out)
    return out


GEMINI_CONFIG = {
    "temperature": 0.4, "topP": 0.9, "topK": 40, "maxOutputTokens": 64,
    "stopSequences": ["END", "STOP"], "candidateCount": 2, "seed": 11,
    "presencePenalty": 0.5, "frequencyPenalty": 0.25,
}
GEMINI_EXPECTED = {
    "gen_ai.request.temperature": 0.4, "gen_ai.request.top_p": 0.9,
    "gen_ai.request.top_k": 40, "gen_ai.request.max_tokens": 64,
    "gen_ai.request.stop_sequences": ["END", "STOP"], "gen_ai.request.choice.count": 2,
    "gen_ai.request.seed": 11, "gen_ai.request.presence_penalty": 0.5,
    "gen_ai.request.frequency_penalty": 0.25,
}


def test_gemini_generation_config_in_google_genai_spelling() -> None:
    body = {"contents": [], "generationConfig": GEMINI_CONFIG}
    assert request_attributes(body, "gemini") == GEMINI_EXPECTED


def test_gemini_generation_config_in_snake_case() -> None:
    snake = {
        "temperature": 0.4, "top_p": 0.9, "top_k": 40, "max_output_tokens": 64,
        "stop_sequences": ["END", "STOP"], "candidate_count": 2, "seed": 11,
        "presence_penalty": 0.5, "frequency_penalty": 0.25,
    }
    body = {"contents": [], "generation_config": snake}
    assert request_attributes(body, "gemini") == GEMINI_EXPECTED


@pytest.mark.parametrize(("mime", "output"), [("application/json", "json"),
                                              ("text/plain", "text")])
def test_gemini_response_mime_type_is_the_output_type(mime: str, output: str) -> None:
    body = {"generationConfig": {"responseMimeType": mime}}
    assert request_attributes(body, "gemini")["gen_ai.output.type"] == output


def test_chat_completions_parameters() -> None:
    body = {
        "model": "m", "messages": [], "max_completion_tokens": 30, "temperature": 0.0,
        "top_p": 1, "frequency_penalty": -0.5, "presence_penalty": 0.75, "seed": 3,
        "stop": "\n\n", "n": 3, "response_format": {"type": "json_schema", "json_schema": {}},
    }
    assert request_attributes(body, "chat_completions") == {
        "gen_ai.request.max_tokens": 30,
        "gen_ai.request.temperature": 0.0, "gen_ai.request.top_p": 1,
        "gen_ai.request.frequency_penalty": -0.5, "gen_ai.request.presence_penalty": 0.75,
        "gen_ai.request.seed": 3, "gen_ai.request.stop_sequences": ["\n\n"],
        "gen_ai.request.choice.count": 3, "gen_ai.output.type": "json",
    }


def test_chat_completions_one_choice_and_a_text_format() -> None:
    """``n=1`` is the default: the conventions record the count only when it is not 1."""
    body = {"max_tokens": 5, "n": 1, "response_format": {"type": "text"}}
    assert request_attributes(body, "chat_completions") == {
        "gen_ai.request.max_tokens": 5,
        "gen_ai.output.type": "text",
    }


@pytest.mark.parametrize(("fmt", "output"), [("json_schema", "json"), ("text", "text")])
def test_responses_parameters(fmt: str, output: str) -> None:
    body = {"model": "m", "input": "hi", "max_output_tokens": 20, "temperature": 0.3,
            "top_p": 0.8, "text": {"format": {"type": fmt}}}
    assert request_attributes(body, "responses") == {
        "gen_ai.request.max_tokens": 20,
        "gen_ai.request.temperature": 0.3, "gen_ai.request.top_p": 0.8,
        "gen_ai.output.type": output,
    }


def test_anthropic_messages_parameters() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 1024, "temperature": 1.0,
            "top_p": 0.7, "top_k": 5, "stop_sequences": ["Human:"]}
    assert request_attributes(body, "anthropic_messages") == {
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.request.temperature": 1.0, "gen_ai.request.top_p": 0.7,
        "gen_ai.request.top_k": 5, "gen_ai.request.stop_sequences": ["Human:"],
    }


@pytest.mark.parametrize("api", [*apis.names(), None])
def test_values_of_the_wrong_type_are_not_recorded(api: str | None) -> None:
    body = {"temperature": "hot", "seed": True, "stop": [1, 2], "n": 2.0,
            "generationConfig": {"topK": None, "stopSequences": []}}
    assert request_attributes(body, api) == {}


def test_each_api_is_read_in_its_own_names_first() -> None:
    """A Responses request is capped by ``max_output_tokens`` (a ``max_tokens`` beside it is
    no cap its server knows of), and Gemini's spelling is no Responses parameter."""
    body = {"input": "hi", "max_tokens": 5, "max_output_tokens": 20, "topK": 3}
    assert request_attributes(body, "responses") == {
        "gen_ai.request.max_tokens": 20,
    }


@pytest.mark.parametrize("api", apis.registered(), ids=apis.names())
def test_the_cap_and_sampling_a_request_is_made_with_are_recorded(api: apis.Api) -> None:
    """Read where the API's own request builder put them (Gemini's ``generationConfig``)."""
    fields = {api.max_tokens_field: 77, **api.sampling({"temperature": 0.25, "top_p": 0.5})}
    body = api.streaming_body("m", [{"role": "user", "content": "hi"}], fields,
                              include_usage=False)
    assert request_attributes(body, api.name) == {
        "gen_ai.request.max_tokens": 77,
        "gen_ai.request.temperature": 0.25, "gen_ai.request.top_p": 0.5,
    }


def test_gemini_contents_are_the_input_messages() -> None:
    body = {"systemInstruction": {"parts": [{"text": "be brief"}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                         {"role": "model", "parts": [{"text": "hello"}]}]}
    assert input_messages(body) == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]},
    ]


@pytest.mark.anyio
async def test_a_gemini_reply_span_carries_its_generation_config(
    server: ServerThread, telemetry: Telemetry
) -> None:
    config = {k: v for k, v in GEMINI_CONFIG.items() if k != "candidateCount"}
    async with fluxstream.AsyncClient(server.url + "/v1beta", api_key="AIza-test",
                                      observers=[telemetry.observer()]) as client:
        reply = await client.gemini.complete(
            model="gemini-2.5-flash", contents=[{"role": "user", "parts": [{"text": "hi"}]}],
            generation_config=config,
        )
    (span,) = telemetry.spans()
    attributes: dict[str, Any] = dict(span.attributes or {})
    assert span.name == "generate_content gemini-2.5-flash" and span.kind is SpanKind.CLIENT
    assert attributes["gen_ai.operation.name"] == "generate_content"
    assert attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert attributes["gen_ai.request.stream"] is True
    expected = {k: v for k, v in GEMINI_EXPECTED.items() if k != "gen_ai.request.choice.count"}
    for name, value in expected.items():
        assert attributes[name] == (tuple(value) if isinstance(value, list) else value), name
    assert attributes["fluxstream.outcome"] == reply.outcome.value == "done"
