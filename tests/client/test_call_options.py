"""A call's options are one value, and every typed signature offers exactly its fields.

The typed ``stream`` and ``resume`` signatures spell the per-call options out for users, IDEs
and type checkers, and hand them down as one
:class:`~fluxstream._io.call_options.CallOptions`: each signature must have a parameter for
every option (``resume``: those of ``RESUME_OPTIONS``), with the field's type and default, and
put each one in the value, so that a new option added to ``CallOptions`` cannot be forgotten in
one API's signature, and nothing the caller passes is lost on the way down.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import fluxstream
from fluxstream import Failover, ResumePolicy, RetryPolicy, Timeouts, Upstream
from fluxstream._io.call_options import RESUME_OPTIONS, CallOptions
from fluxstream._typed_endpoints import Chat, Gemini, Messages, Responses

ENDPOINTS = [Chat, Responses, Messages, Gemini]


def _fields() -> dict[str, tuple[str, Any]]:
    """Each option's annotation (as written) and default."""
    annotations = {name: getattr(a, "__forward_arg__", a)  # a NamedTuple keeps ForwardRefs
                   for name, a in CallOptions.__annotations__.items()}
    return {name: (annotations[name], CallOptions._field_defaults[name])
            for name in CallOptions._fields}


@pytest.mark.parametrize(("endpoint", "method"), [
    *((e, "stream") for e in ENDPOINTS), *((e, "resume") for e in ENDPOINTS),
])
def test_every_typed_signature_offers_each_option_as_the_value_types_it(
    endpoint: type, method: str
) -> None:
    parameters = inspect.signature(getattr(endpoint, method)).parameters
    wanted = CallOptions._fields if method == "stream" else RESUME_OPTIONS
    for name in wanted:
        annotation, default = _fields()[name]
        assert name in parameters, f"{endpoint.__name__}.{method} has no {name}="
        parameter = parameters[name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, (endpoint, method, name)
        assert (parameter.annotation, parameter.default) == (annotation, default), (
            endpoint, method, name)
    if method == "resume":  # nothing a resume does not use is offered
        assert not set(CallOptions._fields) - set(RESUME_OPTIONS) & set(parameters)


def test_the_resume_options_are_options() -> None:
    assert set(RESUME_OPTIONS) <= set(CallOptions._fields)


class Recording:
    """Stands for a generic endpoint: keeps what a typed signature hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, CallOptions]] = []

    def stream(self, body: dict[str, Any], options: CallOptions) -> None:
        self.calls.append(("stream", options))

    def resume(self, token: Any, options: CallOptions) -> None:
        self.calls.append(("resume", options))


def test_what_a_call_passes_reaches_the_endpoint_whole() -> None:
    """Every option given to every typed signature arrives, as given, in one value."""
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", "k")
    given: dict[str, Any] = {
        "tools": [{"type": "function"}], "content_key": "ck", "extra_headers": {"x-a": "1"},
        "strict": True, "retry": RetryPolicy.off(), "resume": ResumePolicy.off(),
        "response_format": dict, "log": object(), "timeouts": Timeouts(stall=3),
        "observers": (object(),), "fallbacks": [Upstream("http://127.0.0.1:8/v1")],
        "failover": Failover(), "raise_for_outcome": True,
        "think_tags": fluxstream.ThinkTags(names=("think",)), "json_paths": True,
    }
    assert set(given) == set(CallOptions._fields)
    requests = {
        "chat": {"model": "m", "messages": []},
        "responses": {"model": "m", "input": "hi"},
        "messages": {"model": "m", "messages": [], "max_tokens": 5},
        "gemini": {"model": "m", "contents": []},
    }
    for name, request in requests.items():
        typed = getattr(client, name)
        typed._endpoint = recording = Recording()
        if name == "chat":
            typed._endpoints = {"chat_completions": recording}
        typed.stream(**request, **given)
        typed.resume({"path": "chat/completions"} if name == "chat" else {},
                     **{k: given[k] for k in RESUME_OPTIONS})
        (_, streamed), (_, resumed) = recording.calls
        assert streamed == CallOptions(**given), name
        assert resumed == CallOptions(**{k: given[k] for k in RESUME_OPTIONS}), name
