"""The embedded server speaks Gemini over 127.0.0.1: ``streamGenerateContent?alt=sse`` (and
without ``alt=sse`` a JSON array, ``generateContent`` one response) on the v1beta, v1 and
Vertex paths, Google's key rules and error bodies, the same faults as the other APIs; read by
fluxstream's own parser and by google-genai, each assembling exactly the script."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fluxstream._events import Outcome
from fluxstream._parser import StreamParser, replay
from fluxstream.server import ServerThread, script_for

USER = [{"role": "user", "parts": [{"text": "Weather in Zürich?"}]}]
BODY: dict[str, Any] = {"contents": USER}
MODEL = "gemini-2.5-flash"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url.removesuffix("/v1"), timeout=30) as client:
        yield client


def _expected(body: dict[str, Any] = BODY, profile: str | None = None) -> Any:
    return script_for("gemini", {**body, "model": MODEL}, profile)


@pytest.mark.parametrize("path", [
    STREAM,
    f"/v1/models/{MODEL}:streamGenerateContent?alt=sse",
    f"/v1/projects/p/locations/us-central1/publishers/google/models/{MODEL}"
    ":streamGenerateContent?alt=sse",
])
def test_stream_assembles_exactly_the_script(http: httpx.Client, path: str) -> None:
    response = http.post(path, json=BODY)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert b"[DONE]" not in response.content
    reply = replay([response.content], format="gemini")
    script = _expected()
    assert reply.text == script.choices[0].text and reply.outcome is Outcome.DONE
    assert reply.choices[0].finish_reason == "STOP"
    assert reply.usage is not None and reply.usage.total_tokens == script.usage["total_tokens"]


def test_without_alt_sse_a_json_array_and_generate_content_one_response(
    http: httpx.Client,
) -> None:
    array = http.post(f"/v1beta/models/{MODEL}:streamGenerateContent", json=BODY).json()
    assert isinstance(array, list) and len(array) > 1
    parser = StreamParser(format="gemini")
    for item in array:
        parser.feed_chunk(item)
    parser.close()
    assert parser.reply.text == _expected().choices[0].text
    one = http.post(f"/v1beta/models/{MODEL}:generateContent", json=BODY).json()
    assert one["candidates"][0]["content"]["parts"][0]["text"] == _expected().choices[0].text


@pytest.mark.parametrize("profile", ["crlf", "nospace", "multiline", "heartbeats", "reasoning",
                                     "sse-ids", "crlf,heartbeats,multiline"])
def test_profiles_frame_the_same_content(http: httpx.Client, profile: str) -> None:
    response = http.post(STREAM, json=BODY, headers={"x-fluxstream-profile": profile})
    reply = replay([response.content], format="gemini")
    script = _expected(profile=profile)
    assert reply.text == script.choices[0].text and reply.outcome is Outcome.DONE
    assert (reply.choices[0].reasoning or "") == (
        script.choices[0].reasoning if script.reasoning else "")


def test_the_model_suffix_names_profiles(http: httpx.Client) -> None:
    response = http.post(f"/v1beta/models/{MODEL}@error-midstream:streamGenerateContent"
                         "?alt=sse", json=BODY)
    reply = replay([response.content], format="gemini")
    assert reply.outcome is Outcome.FAILED and reply.error is not None
    assert (reply.error.code, reply.error.type) == ("503", "UNAVAILABLE")


@pytest.mark.parametrize("fault", ["drop-after-events=3", "drop-after=200,drop-reset=1"])
def test_a_dropped_stream_is_truncated(http: httpx.Client, fault: str) -> None:
    parser = StreamParser(format="gemini")
    cause: BaseException | None = None
    try:
        with http.stream("POST", STREAM, json=BODY,
                         headers={"x-fluxstream-fault": fault}) as response:
            for data in response.iter_bytes():
                parser.feed(data)
    except httpx.HTTPError as exc:
        cause = exc
    parser.close(cause=cause)
    reply = parser.reply
    assert reply.stream_end is Outcome.TRUNCATED
    assert _expected().choices[0].text.startswith(reply.text)


@pytest.mark.parametrize(("status", "name"), [(429, "RESOURCE_EXHAUSTED"), (503, "UNAVAILABLE"),
                                              (500, "INTERNAL")])
def test_status_faults_answer_in_googles_shape(http: httpx.Client, status: int,
                                               name: str) -> None:
    response = http.post(STREAM, json=BODY, headers={"x-fluxstream-fault": f"status={status}"})
    assert response.status_code == status
    assert response.json()["error"]["code"] == status
    assert response.json()["error"]["status"] == name


def test_google_key_rules(server_factory: Any) -> None:
    running = server_factory(api_key="AIza-test")
    base = running.base_url.removesuffix("/v1")
    with httpx.Client(base_url=base, timeout=30) as client:
        assert client.post(STREAM, json=BODY).status_code == 403
        wrong = client.post(STREAM, json=BODY, headers={"x-goog-api-key": "nope"})
        assert wrong.status_code == 400 and wrong.json()["error"]["status"] == (
            "INVALID_ARGUMENT")
        ok = client.post(STREAM, json=BODY, headers={"x-goog-api-key": "AIza-test"})
        assert ok.status_code == 200
        assert client.post(STREAM + "&key=AIza-test", json=BODY).status_code == 200
        assert client.post(STREAM, json=BODY, headers={
            "authorization": "Bearer AIza-test"}).status_code == 200
        # OpenAI's listing stays OpenAI's.
        assert client.get("/v1/models", headers={
            "authorization": "Bearer AIza-test"}).status_code == 200


def test_a_bad_body_is_refused_in_googles_shape(http: httpx.Client) -> None:
    response = http.post(STREAM, json={"nope": 1})
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"


def test_a_continuation_streams_the_rest(http: httpx.Client) -> None:
    whole = _expected().choices[0].text
    body = {"contents": [*USER, {"role": "model", "parts": [{"text": whole[:20]}]}]}
    response = http.post(STREAM, json=body)
    assert response.headers["x-fluxstream-continuation"] == "continued"
    assert replay([response.content], format="gemini").text == whole[20:]


# --------------------------------------------------------------------------- google-genai


def _genai(server: ServerThread, key: str = "test") -> Any:
    genai = pytest.importorskip("google.genai")
    types = pytest.importorskip("google.genai.types")
    options = types.HttpOptions(base_url=server.base_url.removesuffix("/v1"),
                                retry_options=types.HttpRetryOptions(attempts=1))
    return genai.Client(api_key=key, http_options=options)


def test_google_genai_reads_the_server_exactly(server: ServerThread) -> None:
    client = _genai(server)
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="Weather?"))
    text = "".join(c.text or "" for c in chunks)
    script = script_for("gemini", {"model": MODEL, "contents": [
        {"parts": [{"text": "Weather?"}], "role": "user"}]})
    assert text == script.choices[0].text
    assert chunks[-1].candidates[0].finish_reason.value == "STOP"
    whole = client.models.generate_content(model=MODEL, contents="Weather?")
    assert whole.text == script.choices[0].text


def test_google_genai_raises_a_transport_error_on_a_cut_connection(server_factory: Any) -> None:
    """A connection cut inside a chunk: google-genai lets the HTTP library's error out (not
    one of its own); a body that ends cleanly without a finish reason it takes silently
    (tests/formats/test_interop_gemini.py)."""
    running = server_factory(faults="drop-after-events=3")
    client = _genai(running)
    with pytest.raises(Exception) as raised:
        list(client.models.generate_content_stream(model=MODEL, contents="Weather?"))
    assert type(raised.value).__name__ == "RemoteProtocolError"


def test_google_genai_raises_on_the_servers_error_bodies(server_factory: Any) -> None:
    errors = pytest.importorskip("google.genai.errors")
    running = server_factory(faults="status=429")
    client = _genai(running)
    with pytest.raises(errors.ClientError) as raised:
        list(client.models.generate_content_stream(model=MODEL, contents="x"))
    assert raised.value.code == 429 and raised.value.status == "RESOURCE_EXHAUSTED"
    json.dumps(raised.value.details)
