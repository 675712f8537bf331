"""``client.responses`` (OpenAI Responses API) and ``client.messages`` (Anthropic Messages).

Both stream through exactly what ``client.chat`` uses — the same :class:`~fluxstream.stream.
ReplyStream`, timeouts, cancellation, retries, resume and error mapping — and differ only in
the request they build and the wire format their parser reads (``"responses"`` /
``"anthropic_messages"``). They live in their own module so that the request shapes of each
API stay in one place.

Anthropic's conventions (as anthropic-sdk-python sends them): the key goes in ``x-api-key``
(added when the request is built, never stored with the request, so it cannot reach a repr, a
log line, an error or a resume token), with ``anthropic-version``. A gateway that wants a
Bearer token instead: pass ``headers={"Authorization": "Bearer ..."}`` (then no ``x-api-key``
is sent). ``529 overloaded_error`` is retried before content like a 503. With
``ResumePolicy(continuation=True)`` a drop after content is continued the Anthropic way: the
partial text becomes a trailing assistant message (prefill; no ``prefix`` flag) and the new
message's echo of it is cut (the prefill is sent without trailing whitespace, which
Anthropic rejects; the whitespace the new message repeats is cut as an echo).
:func:`anthropic_client` makes a client from ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from ._io.structured_output import prepare, structured_for, structured_request
from .errors import ResumeTokenError, show_key
from .observe import StreamObserver
from .parser import StreamParser, new_content_key
from .reply import Reply
from .retry import ResumePolicy, RetryPolicy
from .stream import RESUME_TOKEN_VERSION, ReplyStream
from .timeouts import Timeouts

if TYPE_CHECKING:  # pragma: no cover
    from .client import AsyncClient

__all__ = [
    "ANTHROPIC_VERSION", "Messages", "Responses", "anthropic_client", "completing", "token_api",
]

#: The ``anthropic-version`` header sent with Messages requests (the API's stable version).
ANTHROPIC_VERSION = "2023-06-01"
#: Anthropic's "overloaded" status: as retryable before content as a 503.
OVERLOADED = 529
_DEFAULT_PREFIX_FLAG = ResumePolicy().prefix_flag

_P = ParamSpec("_P")
_E = TypeVar("_E")


#: The APIs a resume token may name: the path each endpoint posts to (under ``base_url``),
#: with the attribute of the client that serves it.
TOKEN_APIS = {"chat/completions": "chat", "responses": "responses", "messages": "messages"}


def token_api(token: Mapping[str, Any]) -> str:
    """The API ``token`` continues (a key of :data:`TOKEN_APIS`), or ``ResumeTokenError``.

    A token is input (it comes back from a database, a browser, another worker), so the path
    it names only *chooses* among the APIs this client knows; the request goes to the
    client's own path for that API, never to the token's text. Tokens made before the other
    endpoints existed have no path: Chat Completions.
    """
    named = token.get("path")
    if named is None or named == "":
        return "chat/completions"
    if isinstance(named, str) and named.strip("/") in TOKEN_APIS:
        return named.strip("/")
    shown = show_key(named) if isinstance(named, str) else f"a {type(named).__name__}"
    raise ResumeTokenError(
        f"the resume token names no API this client knows ({shown}); a token continues "
        f"one of: {', '.join(TOKEN_APIS)}"
    )


def completing(
    stream: Callable[Concatenate[_E, _P], ReplyStream],
) -> Callable[Concatenate[_E, _P], Coroutine[Any, Any, Reply]]:
    """``complete`` for an endpoint, typed with exactly its ``stream``'s parameters.

    Written once so the three endpoints' ``complete`` cannot drift from their ``stream``, and
    typed through ``ParamSpec`` so a caller's mistake is still a type error.
    """

    async def complete(self: _E, /, *args: _P.args, **kwargs: _P.kwargs) -> Reply:
        async with stream(self, *args, **kwargs) as opened:
            return await opened.complete()

    complete.__doc__ = (
        "Stream underneath and return the whole reply (the same arguments as ``stream``).\n\n"
        "Raises :class:`~fluxstream.errors.StreamTruncatedError` or "
        ":class:`~fluxstream.errors.StreamFailedError` (each carrying the partial reply as "
        "``error.reply``) unless the stream ended ``done`` or ``finished``."
    )
    complete.__name__ = "complete"
    complete.__qualname__ = stream.__qualname__.rsplit(".", 1)[0] + ".complete"
    # help() and IDEs that read the runtime signature see stream's parameters, not *args.
    complete.__signature__ = inspect.signature(stream).replace(  # type: ignore[attr-defined]
        return_annotation="Reply"
    )
    return complete


def anthropic_client(base_url: str | None = None, api_key: str | None = None,
                     **kwargs: Any) -> AsyncClient:
    """An :class:`~fluxstream.client.AsyncClient` for Anthropic (or an Anthropic-compatible
    gateway): ``base_url`` falls back to ``ANTHROPIC_BASE_URL``, then
    ``https://api.anthropic.com``; ``/v1`` is appended when missing (Anthropic's base URLs
    name the host, fluxstream's the API root). ``api_key`` falls back to
    ``ANTHROPIC_API_KEY``. Other arguments as for ``AsyncClient``."""
    from .client import AsyncClient

    base = (base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com")
    # ``/v1`` goes at the end of the path, before a query (a gateway's ``?api-version=``).
    path, mark, query = base.partition("?")
    path = path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY", "")
    return AsyncClient(path + mark + query, key, **kwargs)


class _Endpoint:
    path = ""
    format = ""
    #: The fields a continuation's appended assistant message carries instead of the Chat
    #: default ``prefix`` flag (``None``: the default stays; a flag the caller chose is kept).
    continuation_flag: ClassVar[Mapping[str, object] | None] = None

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _build(self) -> Any:
        """The request builder (the client's own, unless the API authenticates otherwise)."""
        return None

    def _retry(self, retry: RetryPolicy | None) -> RetryPolicy | None:
        return retry

    def _resume(self, resume: ResumePolicy | None) -> ResumePolicy | None:
        flag = self.continuation_flag
        if flag is None:
            return resume
        policy = resume if resume is not None else self._client.resume
        if policy.continuation and policy.prefix_flag == _DEFAULT_PREFIX_FLAG:
            return dataclasses.replace(policy, prefix_flag=dict(flag))
        return policy

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
    ) -> ReplyStream:
        """Continue a logical stream of this API from :meth:`ReplyStream.resume_token` (as
        ``client.chat.resume`` does, which hands such tokens here): same content key, offsets
        that go on, the partial reply already in ``stream.reply``. ``response_format``: the
        type the original stream was asked for (a token carries its schema, not the type),
        so that ``objects()`` and ``parsed`` continue from the partial object.
        ``observers``: :class:`~fluxstream.observe.StreamObserver` s told of this stream only
        (after the client's own)."""
        stream = resume_from_token(
            self._client, token, path=self.path, format=self.format,
            extra_headers=extra_headers, retry=self._retry(retry), resume=self._resume(resume),
            build=self._build(), timeouts=timeouts,
        )
        return prepare(stream, structured_for(self.path, response_format), None, observers)

    def _open(self, body: dict[str, Any], *, tools: Sequence[Mapping[str, Any]] | None,
              response_format: Any, log: Any, observers: Sequence[StreamObserver],
              content_key: str | None,
              extra_headers: Mapping[str, str] | None, strict: bool,
              retry: RetryPolicy | None, resume: ResumePolicy | None,
              timeouts: Timeouts | None) -> ReplyStream:
        """What every endpoint's ``stream`` does once its API's own fields are in ``body``:
        tools, structured output, ``stream: true``, then ``client.chat._open`` (which logs
        the request, with this endpoint's path)."""
        if tools is not None:
            body["tools"] = list(tools)
        structured = structured_request(self.path, body, response_format)
        body["stream"] = True
        stream = self._client.chat._open(
            body, content_key=content_key or new_content_key(),
            headers=dict(extra_headers or {}), strict=strict, retry=self._retry(retry),
            resume=self._resume(resume), path=self.path, format=self.format,
            build=self._build(), timeouts=timeouts,
        )
        return prepare(stream, structured, log, observers)


def resume_from_token(
    client: AsyncClient,
    token: Mapping[str, Any],
    *,
    path: str,
    format: str,
    extra_headers: Mapping[str, str] | None,
    retry: RetryPolicy | None,
    resume: ResumePolicy | None,
    build: Any = None,
    timeouts: Timeouts | None = None,
) -> ReplyStream:
    """The one way a resume token becomes a stream, for ``client.chat.resume`` and each
    endpoint's ``resume``: the token's version is checked, its partial reply and offsets are
    taken over by a parser of the API's wire ``format``, and its body is sent again to
    ``path``, the endpoint's own (the token must name that API: :func:`token_api`)."""
    if not isinstance(token, Mapping):
        raise ResumeTokenError(f"a resume token is a mapping, not {type(token).__name__}")
    named = token_api(token)
    if named != path:  # read as this API's wire format, it would be sent to the wrong API
        raise ResumeTokenError(
            f"the resume token is of another API ({named!r}, not {path!r}): resume it with "
            f"client.{TOKEN_APIS[named]}.resume"
        )
    if token.get("version") != RESUME_TOKEN_VERSION:
        raise ResumeTokenError(f"unsupported resume token version {token.get('version')!r}")
    if not isinstance(token.get("body"), Mapping):
        raise ResumeTokenError("the resume token has no request 'body' to send again")
    parser = StreamParser.from_token(
        token, format=format, max_event_bytes=client.max_event_bytes,
        require_finish_reason=client.require_finish_reason, limits=client.stream_limits,
    )
    return client.chat._open(
        dict(token["body"]), content_key=parser.content_key,
        headers=dict(extra_headers or {}), strict=False, retry=retry, resume=resume,
        parser=parser, path=path, format=format, build=build, timeouts=timeouts,
    )


class Responses(_Endpoint):
    """``client.responses``: OpenAI Responses API streaming (``POST {base_url}/responses``)."""

    path = "responses"
    format = "responses"
    #: A continuation appends the partial answer to ``input`` as an assistant message marked
    #: ``"status": "in_progress"`` (the Responses API's "unfinished" marker, which servers
    #: that continue a partial message honour). See
    #: :func:`fluxstream._io.reconnect.continuation_body`.
    continuation_flag: ClassVar[Mapping[str, object] | None] = {"status": "in_progress"}

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
        ``observers``: :class:`~fluxstream.observe.StreamObserver` s told of this stream only
        (after the client's own).
        """
        body: dict[str, Any] = {"model": model, "input": input, **params}
        if isinstance(input, Sequence) and not isinstance(input, str):
            body["input"] = list(input)
        if instructions is not None:
            body["instructions"] = instructions
        return self._open(body, tools=tools, response_format=response_format, log=log,
                          observers=observers,
                          content_key=content_key, extra_headers=extra_headers, strict=strict,
                          retry=retry, resume=resume, timeouts=timeouts)

    complete = completing(stream)


class Messages(_Endpoint):
    """``client.messages``: Anthropic Messages streaming (``POST {base_url}/messages``)."""

    path = "messages"
    format = "anthropic_messages"
    #: A continuation's prefill is a plain trailing assistant message: Anthropic rejects the
    #: ``prefix: true`` flag that DeepSeek-style APIs need, so the default flag is left out.
    continuation_flag: ClassVar[Mapping[str, object] | None] = {}

    def _build(self) -> Any:
        client = self._client
        build = client._build_request

        def build_with_key(path: str, body: Mapping[str, Any],
                           headers: Mapping[str, str], timeouts: Timeouts) -> Any:
            # The key is read here, at send time, and never stored with the request.
            merged = {"anthropic-version": ANTHROPIC_VERSION,
                      **{name.lower(): value for name, value in headers.items()}}
            own = {name.lower() for name in client._headers}
            key = client._api_key
            if key and not ({"authorization", "x-api-key"} & (own | set(merged))):
                merged["x-api-key"] = key.reveal()
            return build(path, body, merged, timeouts)

        return build_with_key

    def _retry(self, retry: RetryPolicy | None) -> RetryPolicy | None:
        policy = retry if retry is not None else self._client.retry
        if OVERLOADED in policy.retry_status or policy.max_attempts <= 1:
            return policy
        return dataclasses.replace(policy, retry_status=policy.retry_status | {OVERLOADED})

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
        ``observers``: :class:`~fluxstream.observe.StreamObserver` s told of this stream only
        (after the client's own).
        """
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                                "messages": list(messages), **params}
        if system is not None:
            body["system"] = system if isinstance(system, str) else list(system)
        return self._open(body, tools=tools, response_format=response_format, log=log,
                          observers=observers,
                          content_key=content_key, extra_headers=extra_headers, strict=strict,
                          retry=retry, resume=resume, timeouts=timeouts)

    complete = completing(stream)
