"""The typed endpoints: ``client.chat``, ``.responses``, ``.messages`` and ``.gemini``.

Each is a thin typed signature over the client's generic endpoint of its API
(:class:`~fluxstream._io.endpoint.Endpoint`): it spells out its API's request fields and the
per-call options for users, IDEs and type checkers, shapes its body, and hands the generic
endpoint the options as one :class:`~fluxstream._io.call_options.CallOptions`. Whatever else
a stream needs comes from the client's settings, which the generic endpoint holds, so these
classes never see the client (the client imports them, never the reverse). Their public homes
are :mod:`fluxstream._client` (``Chat``) and :mod:`fluxstream._endpoints`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from . import apis
from ._core.think_tags import ThinkTags
from ._io.call_options import CallOptions, in_order
from ._io.endpoint import Endpoint, completing
from ._observe import StreamObserver
from ._retry import ResumePolicy, RetryPolicy
from ._stream import ReplyStream
from ._timeouts import Timeouts
from ._upstream import Failover, Upstream
from .apis import Api
from .apis.anthropic_messages import ANTHROPIC_MESSAGES
from .apis.chat_completions import CHAT_COMPLETIONS, with_usage
from .apis.gemini import GEMINI
from .apis.responses import RESPONSES

__all__ = ["Chat", "Gemini", "Messages", "Responses"]


class _TypedEndpoint:
    """What the typed signatures of the APIs share: the client's generic endpoint of their
    API (:attr:`_api`), and ``resume``, which has nothing of an API's own to add."""

    #: The registered API whose endpoint this is.
    _api: ClassVar[Api]

    def __init__(self, endpoints: Mapping[str, Endpoint]) -> None:
        self._endpoint = endpoints[self._api.name]

    def resume(
        self,
        token: Mapping[str, Any],
        *,
        extra_headers: Mapping[str, str] | None = None,
        resume: ResumePolicy | None = None,
        retry: RetryPolicy | None = None,
        response_format: Any = None,
        timeouts: Timeouts | None = None,
        observers: Sequence[StreamObserver] = (),
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
        think_tags: ThinkTags | bool | None = None,
    ) -> ReplyStream:
        """Continue a logical stream of this API from :meth:`ReplyStream.resume_token` (as
        ``client.chat.resume`` does, which hands such tokens here): same content key, offsets
        that go on, the partial reply already in ``stream.reply``. ``response_format``: the
        type the original stream was asked for (a token carries its schema, not the type),
        so that ``objects()`` and ``parsed`` continue from the partial object.
        ``observers``: :class:`~fluxstream._observe.StreamObserver` s told of this stream only
        (after the client's own). ``fallbacks`` and ``failover``: as for ``stream`` (the
        upstream the token names as serving must be among them; the resume goes on there,
        then moves along the ones after it); ``raise_for_outcome`` too. A client with a
        ``token_secret`` resumes only a token signed with one of its secrets.
        ``think_tags``: as for ``stream`` (``None``: the client's)."""
        return self._endpoint.resume(token, CallOptions(
            extra_headers=extra_headers, resume=resume, retry=retry,
            response_format=response_format, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
            think_tags=think_tags,
        ))


class Chat(_TypedEndpoint):
    """``client.chat``: Chat Completions streaming."""

    _api = CHAT_COMPLETIONS

    def __init__(self, endpoints: Mapping[str, Endpoint]) -> None:
        super().__init__(endpoints)
        self._endpoints = endpoints

    def stream(
        self,
        /,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        content_key: str | None = None,
        include_usage: bool = True,
        extra_headers: Mapping[str, str] | None = None,
        strict: bool = False,
        retry: RetryPolicy | None = None,
        resume: ResumePolicy | None = None,
        response_format: Any = None,
        log: Any = None,
        timeouts: Timeouts | None = None,
        observers: Sequence[StreamObserver] = (),
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
        think_tags: ThinkTags | bool | None = None,
        json_paths: bool = False,
        **params: Any,
    ) -> ReplyStream:
        """Open a streaming chat request (lazily: on ``async with`` or the first ``anext``).

        ``stream: true`` is always set, and ``stream_options.include_usage`` unless
        ``include_usage=False``. Other keyword arguments go into the request body as they are.
        ``content_key`` names the logical request for resumable rendering (generated if None);
        ``retry`` and ``resume`` override the client's policies for this request, and the
        fields given in ``timeouts`` (:class:`~fluxstream._timeouts.Timeouts`) the client's.
        ``response_format``: a pydantic model (or any type pydantic adapts) is sent as its
        strict JSON schema and read back by ``stream.objects()`` / ``stream.parsed``; a
        ``dict`` is sent untouched. ``log``: a :class:`fluxstream.relay.ReplyLog` that records
        the stream as it is delivered (``log.record(stream)``, same API).
        ``observers``: :class:`~fluxstream._observe.StreamObserver` s told of this stream only
        (after the client's own). ``fallbacks``: :class:`~fluxstream._upstream.Upstream` s
        for this request instead of the client's; ``failover``: its
        :class:`~fluxstream._upstream.Failover`; ``raise_for_outcome``: whether the end of
        iteration raises unless the stream ended well (see
        :class:`~fluxstream._client.AsyncClient`; ``None``: the client's).
        ``think_tags``: reasoning the server sends inside the text between tags
        (``<think>…</think>``) is read as reasoning (``True``: the default tags; a
        :class:`~fluxstream._core.think_tags.ThinkTags`; ``False``: off; ``None``: the
        client's).
        ``json_paths``:
        path events after the deltas, for each tool call's arguments and a typed
        ``response_format``'s object (see ``docs/recipes/json-paths.md``).
        """
        body: dict[str, Any] = {"model": model, "messages": list(messages), **params}
        if include_usage:
            with_usage(body)
        return self._endpoint.stream(body, in_order((
            tools, content_key, extra_headers, strict, retry, resume, response_format, log,
            timeouts, observers, fallbacks, failover, raise_for_outcome,
            think_tags, json_paths,
        )))

    def resume(
        self,
        token: Mapping[str, Any],
        *,
        extra_headers: Mapping[str, str] | None = None,
        resume: ResumePolicy | None = None,
        retry: RetryPolicy | None = None,
        response_format: Any = None,
        timeouts: Timeouts | None = None,
        observers: Sequence[StreamObserver] = (),
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
        think_tags: ThinkTags | bool | None = None,
    ) -> ReplyStream:
        """Continue a logical stream from :meth:`ReplyStream.resume_token` (e.g. after a worker
        restart): the same content key, offsets that go on where they stopped, and the partial
        reply already in ``stream.reply``; only events after the token's are delivered. A
        token of a Responses or Messages stream is handed to ``client.responses`` /
        ``client.messages``; one naming any other path is a ``ResumeTokenError`` (the request
        path is always the client's own).
        ``response_format``: the type the original stream was asked for (the token carries
        its schema, not the type), so that ``objects()`` and ``parsed`` go on from the
        partial object. ``observers``: :class:`~fluxstream._observe.StreamObserver` s told of
        this stream only (after the client's own). ``fallbacks`` and ``failover``: as for
        ``stream`` (the upstream the token names as serving must be among them; the resume
        goes on there, then moves along the ones after it); ``raise_for_outcome`` too. A
        client with a ``token_secret`` resumes only a token signed with one of its secrets,
        and refuses any other before anything is sent (``ResumeTokenError``).
        ``think_tags``: as for ``stream`` (``None``: the client's)."""
        # The token only chooses among the registered APIs (their own paths, never its text).
        endpoint = self._endpoints[apis.for_token(token).name]
        return endpoint.resume(token, CallOptions(
            extra_headers=extra_headers, resume=resume, retry=retry,
            response_format=response_format, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
            think_tags=think_tags,
        ))

    complete = completing(stream)


class Responses(_TypedEndpoint):
    """``client.responses``: OpenAI Responses API streaming (``POST {base_url}/responses``)."""

    _api = RESPONSES

    def stream(
        self,
        /,
        *,
        model: str,
        input: str | Sequence[Mapping[str, Any]],
        instructions: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        content_key: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        strict: bool = False,
        retry: RetryPolicy | None = None,
        resume: ResumePolicy | None = None,
        response_format: Any = None,
        log: Any = None,
        timeouts: Timeouts | None = None,
        observers: Sequence[StreamObserver] = (),
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
        think_tags: ThinkTags | bool | None = None,
        json_paths: bool = False,
        **params: Any,
    ) -> ReplyStream:
        """Open a streaming Responses request (lazily, like ``client.chat.stream``).

        ``stream: true`` is always set; other keyword arguments (``reasoning``,
        ``max_output_tokens``, ``previous_response_id``, ``background``...) go into the body
        as they are. The reply is choice 0; its tool calls are the ``function_call`` items.
        ``response_format``: a pydantic model (or adaptable type) is sent as ``text.format``
        with its strict JSON schema and read back by ``stream.objects()`` /
        ``stream.parsed``; a ``dict`` is sent as ``text.format`` untouched. ``log``: a
        :class:`fluxstream.relay.ReplyLog` that records the stream (same API). ``timeouts``:
        this request's own deadlines, over the client's (as ``client.chat.stream``).
        ``observers``: :class:`~fluxstream._observe.StreamObserver` s told of this stream only
        (after the client's own). ``fallbacks``: :class:`~fluxstream._upstream.Upstream` s
        for this request instead of the client's; ``failover``: its
        :class:`~fluxstream._upstream.Failover`; ``raise_for_outcome``: whether the end of
        iteration raises unless the stream ended well (see
        :class:`~fluxstream._client.AsyncClient`; ``None``: the client's).
        ``think_tags``: as for ``client.chat.stream``.
        ``json_paths``:
        path events after the deltas, for each tool call's arguments and a typed
        ``response_format``'s object (see ``docs/recipes/json-paths.md``).
        """
        body: dict[str, Any] = {"model": model, "input": input, **params}
        if isinstance(input, Sequence) and not isinstance(input, str):
            body["input"] = list(input)
        if instructions is not None:
            body["instructions"] = instructions
        return self._endpoint.stream(body, in_order((
            tools, content_key, extra_headers, strict, retry, resume, response_format, log,
            timeouts, observers, fallbacks, failover, raise_for_outcome,
            think_tags, json_paths,
        )))

    complete = completing(stream)


class Messages(_TypedEndpoint):
    """``client.messages``: Anthropic Messages streaming (``POST {base_url}/v1/messages``;
    ``base_url`` names the host, as ``ANTHROPIC_BASE_URL`` does, with or without ``/v1``)."""

    _api = ANTHROPIC_MESSAGES

    def stream(
        self,
        /,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int,
        system: str | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        content_key: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        strict: bool = False,
        retry: RetryPolicy | None = None,
        resume: ResumePolicy | None = None,
        response_format: Any = None,
        log: Any = None,
        timeouts: Timeouts | None = None,
        observers: Sequence[StreamObserver] = (),
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
        think_tags: ThinkTags | bool | None = None,
        json_paths: bool = False,
        **params: Any,
    ) -> ReplyStream:
        """Open a streaming Messages request (lazily, like ``client.chat.stream``).

        ``stream: true`` is always set; other keyword arguments (``thinking``,
        ``temperature``, ``stop_sequences``, ``tool_choice``...) go into the body as they
        are. The reply is choice 0; thinking blocks with their signatures are kept in
        ``choice.reasoning_blocks`` to send back with the next request.
        ``response_format``: a pydantic model (or adaptable type) becomes a tool whose
        ``input_schema`` is the type, forced by ``tool_choice`` (unless one is given); its
        input is what ``stream.objects()`` / ``stream.parsed`` read. A ``dict`` is taken as
        that tool, untouched. ``log``: a :class:`fluxstream.relay.ReplyLog` (same API).
        ``timeouts``: this request's own deadlines, over the client's.
        ``observers``: :class:`~fluxstream._observe.StreamObserver` s told of this stream only
        (after the client's own). ``fallbacks``: :class:`~fluxstream._upstream.Upstream` s
        for this request instead of the client's; ``failover``: its
        :class:`~fluxstream._upstream.Failover`; ``raise_for_outcome``: whether the end of
        iteration raises unless the stream ended well (see
        :class:`~fluxstream._client.AsyncClient`; ``None``: the client's).
        ``think_tags``: as for ``client.chat.stream``.
        ``json_paths``:
        path events after the deltas, for each tool call's arguments and a typed
        ``response_format``'s object (see ``docs/recipes/json-paths.md``).
        """
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                                "messages": list(messages), **params}
        if system is not None:
            body["system"] = system if isinstance(system, str) else list(system)
        return self._endpoint.stream(body, in_order((
            tools, content_key, extra_headers, strict, retry, resume, response_format, log,
            timeouts, observers, fallbacks, failover, raise_for_outcome,
            think_tags, json_paths,
        )))

    complete = completing(stream)


class Gemini(_TypedEndpoint):
    """``client.gemini``: Google Gemini streaming (``POST {base_url}/models/{model}:
    streamGenerateContent?alt=sse``; ``base_url`` is the host, as google-genai takes it
    (``https://generativelanguage.googleapis.com``: ``/v1beta`` is added), or a root that
    ends in its version (``.../v1beta``, ``.../v1``, a Vertex ``.../publishers/google``))."""

    _api = GEMINI

    def stream(
        self,
        /,
        *,
        model: str,
        contents: Sequence[Mapping[str, Any]],
        system_instruction: str | Mapping[str, Any] | None = None,
        generation_config: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        content_key: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        strict: bool = False,
        retry: RetryPolicy | None = None,
        resume: ResumePolicy | None = None,
        response_format: Any = None,
        log: Any = None,
        timeouts: Timeouts | None = None,
        observers: Sequence[StreamObserver] = (),
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
        think_tags: ThinkTags | bool | None = None,
        json_paths: bool = False,
        **params: Any,
    ) -> ReplyStream:
        """Open a streaming ``streamGenerateContent`` request (lazily, like
        ``client.chat.stream``).

        ``contents`` are Gemini's turns (``{"role": "user", "parts": [{"text": ...}]}``);
        the model goes in the path, the key in ``x-goog-api-key``. Other keyword arguments
        (``safetySettings``, ``toolConfig``, ``maxOutputTokens``...) go into the body as they
        are (``generationConfig`` fields given at the top level go into it). ``tools``:
        Gemini's tools (``[{"functionDeclarations": [...]}]``). ``response_format``: a
        pydantic model (or adaptable type) becomes ``generationConfig.responseMimeType``
        JSON with ``responseJsonSchema``; a ``dict`` is taken as the schema. The stream is
        ``done`` when the body ends after every candidate's ``finishReason``; a body that
        ends before is ``truncated`` (and, with ``ResumePolicy(continuation=True)``,
        continued by sending the delivered text back as a ``model`` turn).
        ``timeouts``, ``observers``, ``log``, ``fallbacks``, ``failover``,
        ``raise_for_outcome``: as for ``client.chat.stream``.
        ``think_tags``: as for ``client.chat.stream``.
        ``json_paths``: as for ``client.chat.stream``.
        """
        fields: dict[str, Any] = dict(params)
        if system_instruction is not None:
            fields["systemInstruction"] = (
                {"parts": [{"text": system_instruction}]}
                if isinstance(system_instruction, str) else dict(system_instruction)
            )
        if generation_config is not None:
            fields["generationConfig"] = dict(generation_config)
        body = GEMINI.conversation(model, list(contents), fields)
        return self._endpoint.stream(body, in_order((
            tools, content_key, extra_headers, strict, retry, resume, response_format, log,
            timeouts, observers, fallbacks, failover, raise_for_outcome,
            think_tags, json_paths,
        )))

    complete = completing(stream)
