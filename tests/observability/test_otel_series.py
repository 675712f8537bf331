"""What the OpenTelemetry observer makes once per series (server and model) and keeps for the
next stream — a span's first attributes, its name, each metric's attribute set — holds only
what every stream of that series shares: each stream still records its own request, its own
reply and its own server, whichever streams came before it on the same observer."""

from __future__ import annotations

from typing import Any

from conftest import Telemetry

from fluxstream._core.progress import StreamStats
from fluxstream._observe import StreamInfo
from fluxstream._reply import Choice, Outcome, Reply, Usage


def stream(observer: Any, key: str, *, model: str, port: int, body: dict[str, Any],
           reply_model: str, tokens: tuple[int, int]) -> None:
    """One stream through the observer seam, as a stream calls it."""
    span = observer.for_stream()
    span.on_open(StreamInfo(
        content_key=key, path="chat/completions", model=model, resuming=False, body=body,
        api="chat_completions", provider="openai", server_address="127.0.0.1",
        server_port=port))
    reply = Reply(model=reply_model, id=f"id-{key}", content_key=key, outcome=Outcome.DONE,
                  choices=[Choice(index=0, finish_reason="stop")],
                  usage=Usage(prompt_tokens=tokens[0], completion_tokens=tokens[1],
                              total_tokens=sum(tokens)))
    span.on_end(reply, StreamStats(
        bytes=10, events=2, skipped_frames=0, heartbeats=0, time_to_first_token=0.01,
        duration=0.02, attempts=1, resumes=0, content_events=2, time_to_last_token=0.015))


PARAMETERS = ("gen_ai.request.max_tokens", "gen_ai.request.temperature", "gen_ai.output.type")


def test_each_stream_of_a_series_records_its_own_request_reply_and_server(
    telemetry: Telemetry,
) -> None:
    observer = telemetry.observer()
    stream(observer, "one", model="m", port=8000, reply_model="m-1", tokens=(3, 4),
           body={"model": "m", "max_tokens": 5, "temperature": 0.5,
                 "response_format": {"type": "json_object"}})
    stream(observer, "two", model="m", port=8000, reply_model="m-2", tokens=(6, 7),
           body={"model": "m"})  # the same series, asking for nothing
    stream(observer, "three", model="m", port=9000, reply_model="m-1", tokens=(1, 1),
           body={"model": "m", "max_tokens": 7})  # the same model on another server
    stream(observer, "four", model="other", port=8000, reply_model="other", tokens=(2, 2),
           body={"model": "other"})
    spans = {dict(s.attributes or {})["fluxstream.content_key"]: s for s in telemetry.spans()}
    a = {key: dict(span.attributes or {}) for key, span in spans.items()}

    assert [a["one"].get(name) for name in PARAMETERS] == [5, 0.5, "json"]
    assert not any(name in a["two"] for name in PARAMETERS), a["two"]
    assert a["three"]["gen_ai.request.max_tokens"] == 7
    assert "gen_ai.request.temperature" not in a["three"]
    assert not any(name in a["four"] for name in PARAMETERS), a["four"]

    assert {key: (span.name, a[key]["gen_ai.request.model"], a[key]["server.port"])
            for key, span in spans.items()} == {
        "one": ("chat m", "m", 8000), "two": ("chat m", "m", 8000),
        "three": ("chat m", "m", 9000), "four": ("chat other", "other", 8000)}
    assert {key: (a[key]["gen_ai.response.model"], a[key]["gen_ai.response.id"],
                  a[key]["gen_ai.usage.input_tokens"], a[key]["gen_ai.usage.output_tokens"])
            for key in a} == {
        "one": ("m-1", "id-one", 3, 4), "two": ("m-2", "id-two", 6, 7),
        "three": ("m-1", "id-three", 1, 1), "four": ("other", "id-four", 2, 2)}

    metrics = telemetry.metrics()
    durations = {(p.attributes["gen_ai.request.model"], p.attributes["server.port"],
                  p.attributes["gen_ai.response.model"]): p.count
                 for p in metrics["gen_ai.client.operation.duration"]}
    assert durations == {("m", 8000, "m-1"): 1, ("m", 8000, "m-2"): 1,
                         ("m", 9000, "m-1"): 1, ("other", 8000, "other"): 1}
    tokens = {(p.attributes["server.port"], p.attributes["gen_ai.response.model"],
               p.attributes["gen_ai.token.type"]): p.sum
              for p in metrics["gen_ai.client.token.usage"]}
    assert tokens == {
        (8000, "m-1", "input"): 3, (8000, "m-1", "output"): 4,
        (8000, "m-2", "input"): 6, (8000, "m-2", "output"): 7,
        (9000, "m-1", "input"): 1, (9000, "m-1", "output"): 1,
        (8000, "other", "input"): 2, (8000, "other", "output"): 2}
    outcomes = {(p.attributes["server.port"], p.attributes["gen_ai.response.model"],
                 p.attributes["fluxstream.outcome"]): p.value
                for p in metrics["fluxstream.client.stream.outcomes"]}
    assert outcomes == {(8000, "m-1", "done"): 1, (8000, "m-2", "done"): 1,
                        (9000, "m-1", "done"): 1, (8000, "other", "done"): 1}
