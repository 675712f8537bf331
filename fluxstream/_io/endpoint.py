"""The one generic endpoint: a request to any registered API becomes a :class:`ReplyStream` here.

``client.chat``, ``client.responses``, ``client.messages`` and ``client.gemini`` are thin typed
signatures (their parameters, their docstrings) over an :class:`Endpoint` each: what differs
between them is asked of their :class:`~fluxstream.apis.Api` (tools, structured output,
retryable statuses, the continuation flag, resume tokens), what they share is written once
here. A call's options come as one :class:`~fluxstream._io.call_options.CallOptions`; the
client's configuration as the :class:`~fluxstream._io.client_settings.ClientSettings` in force,
which the client hands its endpoints whenever it changes: making a stream reads that value
once and never calls back into the client (this module never imports it).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from .. import apis
from .._core.resume_token import check_version
from .._observe import StreamObserver
from .._parser import StreamParser, new_content_key
from .._reply import Reply
from .._retry import ResumePolicy, RetryPolicy
from .._stream import ReplyStream
from .._upstream import Failover, Upstream
from ..apis import Api, Structured
from ..errors import ResumeTokenError, show_key
from .attempt import RequestSpec
from .call_options import CallOptions
from .client_settings import ClientSettings, RoutePlan, checked_upstreams
from .failover import Route
from .stream_objects import track

__all__ = ["Endpoint", "completing", "prepare"]

logger = logging.getLogger("fluxstream")

_DEFAULT_PREFIX_FLAG = ResumePolicy().prefix_flag

_P = ParamSpec("_P")
_E = TypeVar("_E")


def prepare(
    stream: ReplyStream, structured: Structured | None, log: Any,
    observers: Iterable[StreamObserver] = (),
) -> ReplyStream:
    """The stream an endpoint returns: tracking ``structured`` output, told to the call's
    ``observers`` (after the client's), and recorded into
    ``log`` (a :class:`fluxstream.relay.ReplyLog`; duck-typed, so the stream layer never
    imports the relay). A recorded stream has the stream's whole API (events, ``text()``,
    ``objects()``, ``partial_tool_call()``, ``parsed``, ``complete()``...), so it is typed
    as one."""
    if structured is not None:
        track(stream, structured)
    for observer in observers:
        stream.add_observer(observer)
    if log is None:
        return stream
    return cast("ReplyStream", log.record(stream))


class Endpoint:
    """Streams of one API for one client: ``stream`` from a request body, ``resume`` from a
    token, each made with the client's :attr:`settings` in force."""

    def __init__(self, api: Api, settings: ClientSettings) -> None:
        self.api = api
        #: The client's settings in force (replaced by the client when one is assigned).
        self.settings = settings
        # The retry policy as this API applies it, derived from the last one given (a
        # RetryPolicy is frozen, every field immutable: the same policy, the same result),
        # so a client's streams do not make a new policy each (Anthropic's 529 joins every
        # policy's statuses).
        self._retry: tuple[RetryPolicy | None, RetryPolicy | None] = (None, None)

    def __repr__(self) -> str:
        return f"<fluxstream endpoint {self.api.name!r}>"

    def retry_policy(self, retry: RetryPolicy | None) -> RetryPolicy:
        """``retry`` (or the client's), retrying the API's own statuses too (Anthropic's 529
        "overloaded", like a 503) unless retries are off."""
        policy = retry if retry is not None else self.settings.retry
        given, derived = self._retry
        if given is policy and derived is not None:
            return derived
        derived = policy
        extra = self.api.retry_statuses
        if extra and not extra <= policy.retry_status and policy.max_attempts > 1:
            derived = dataclasses.replace(policy, retry_status=policy.retry_status | extra)
        self._retry = (policy, derived)
        return derived

    def resume_policy(self, resume: ResumePolicy | None, settings: ClientSettings) -> ResumePolicy:
        """``resume`` (or the client's), whose continuation marks the appended assistant
        message the API's way (:attr:`Api.continuation_flag`), unless the caller chose a
        flag."""
        policy = resume if resume is not None else settings.resume
        flag = self.api.continuation_flag
        if flag is not None and policy.continuation and policy.prefix_flag == _DEFAULT_PREFIX_FLAG:
            return dataclasses.replace(policy, prefix_flag=dict(flag))
        return policy

    def stream(self, body: dict[str, Any], options: CallOptions) -> ReplyStream:
        """What every endpoint's ``stream`` does once its API's own fields are in ``body``:
        tools, structured output, ``stream: true``, then the stream (opened lazily) under
        the call's ``timeouts`` over the client's, told to the client's observers then the
        call's, moving to the call's ``fallbacks`` (the client's when ``None``) when its
        upstream fails, raising at the end of iteration unless it ended well when
        ``raise_for_outcome`` (the client's when ``None``)."""
        settings = self.settings
        api = self.api
        if options.tools is not None:
            api.add_tools(body, options.tools)
        structured = api.structured_request(body, options.response_format)
        body["stream"] = True
        parser = settings.parser(
            api, options.content_key or new_content_key(), options.strict, options.think_tags
        )
        if options.json_paths:  # the object is the content unless it is a forced tool's input
            parser.track_paths(content=structured is not None and structured.tool is None)
        request = settings.request(api, body, options.extra_headers, options.timeouts)
        resume = self.resume_policy(options.resume, settings)
        route = None
        if options.fallbacks is not None or settings.fallbacks:  # usually neither: no route
            route = self.route(settings, request, options, resume)
        stream = self.open(settings, request, parser, options, resume, route, resuming=False)
        if structured is None and options.log is None and options.observers == ():
            return stream  # the usual case: nothing to prepare
        return prepare(stream, structured, options.log, options.observers)

    def open(
        self, settings: ClientSettings, request: RequestSpec, parser: StreamParser,
        options: CallOptions, resume: ResumePolicy, route: Route | None, *, resuming: bool,
    ) -> ReplyStream:
        """The one place a request becomes a stream: read by ``parser``, under the call's
        policies or the client's, told to the client's observers, its resume tokens signed
        with the client's secret, one of the client's streams (ended by ``aclose()``)."""
        if logger.isEnabledFor(logging.DEBUG):  # key and model may come from a token: escaped
            logger.debug("%s stream model=%s key=%s", request.path,
                         show_key(request.body.get("model")), show_key(parser.content_key),
                         extra={"content_key": parser.content_key, "request_id": None})
        raise_for_outcome = options.raise_for_outcome
        if raise_for_outcome is None:
            raise_for_outcome = settings.raise_for_outcome
        elif not isinstance(raise_for_outcome, bool):
            raise TypeError(
                f"raise_for_outcome is True, False or None, not {type(raise_for_outcome).__name__}"
            )
        stream = ReplyStream(
            request,
            parser,
            retry=self.retry_policy(options.retry),
            resume=resume,
            resuming=resuming,
            observers=settings.observers,
            route=route,
            token_signer=settings.token_signer,
            raise_for_outcome=raise_for_outcome,
        )
        settings.state.adopt(stream)
        return stream

    def route(
        self, settings: ClientSettings, request: RequestSpec, options: CallOptions,
        resume: ResumePolicy,
    ) -> Route | None:
        """The upstreams of a request: the client's own, then the call's ``fallbacks`` or
        the client's (``None`` when there are none: the stream is exactly what it is without
        failover)."""
        upstreams = self.upstreams(settings, options.fallbacks)
        if not upstreams:
            return None
        policy = self.failover_policy(settings, options.failover)
        plan = settings.route_plan(self.api, upstreams)
        return Route(
            plan.targets(request, policy.shared_headers), request.body,
            cooldown=plan.cooldown(request, policy),
            per_upstream_attempts=policy.per_upstream_attempts,
            min_overlap=resume.min_overlap, prefix_flag=dict(resume.prefix_flag),
            hedge_after=policy.hedge_after,
        )

    @staticmethod
    def upstreams(
        settings: ClientSettings, fallbacks: Sequence[Upstream] | None
    ) -> tuple[Upstream, ...]:
        """The call's ``fallbacks`` (checked), or the client's."""
        return settings.fallbacks if fallbacks is None else checked_upstreams(fallbacks)

    @staticmethod
    def failover_policy(settings: ClientSettings, failover: Failover | None) -> Failover:
        """``failover`` (checked), or the client's."""
        if failover is None:
            return settings.failover
        if not isinstance(failover, Failover):
            raise TypeError(f"failover is a Failover, not {type(failover).__name__}")
        return failover

    def resume(self, token: Mapping[str, Any], options: CallOptions) -> ReplyStream:
        """The one way a resume token becomes a stream: signed with one of the client's
        secrets when it has a ``token_secret`` (checked first, before any part is read), of
        this API (:func:`fluxstream.apis.for_token`), or of the API of one of the call's
        ``fallbacks`` (the client's when ``None``) that the token names as serving it, and
        of this version; its partial reply and offsets are taken over by a parser of that
        API's wire format, and its body is sent again to that API's own path, moving along
        the upstreams after it (under ``failover``) when it fails."""
        settings = self.settings
        signer = settings.token_signer
        if signer is not None:
            signer.verify(token)
        api = self.api
        named = apis.for_token(token)  # refuses a token that is no mapping
        if named is not api:
            # A reply another upstream was continuing (of another API) resumes there, read as
            # that API's wire format: only among this client's own upstreams of that API.
            upstreams = self.upstreams(settings, options.fallbacks)
            label = token.get("upstream")
            if not any(u.label == label and u.api == named.name for u in upstreams):
                raise ResumeTokenError(
                    f"the resume token is of another API ({named.name!r}, not {api.name!r}):"
                    f" resume it with client.{named.endpoint}.resume"
                )
            return Endpoint(named, settings).resume(token, options)
        check_version(token)
        if not isinstance(token.get("body"), Mapping):
            raise ResumeTokenError("the resume token has no request 'body' to send again")
        parser = settings.token_parser(api, token, options.think_tags)
        resume = self.resume_policy(options.resume, settings)
        request, route = self.resume_route(settings, token, dict(token["body"]), options, resume)
        stream = self.open(settings, request, parser, options, resume, route, resuming=True)
        return prepare(stream, api.structured(options.response_format), None, options.observers)

    def resume_route(
        self, settings: ClientSettings, token: Mapping[str, Any], body: dict[str, Any],
        options: CallOptions, resume: ResumePolicy,
    ) -> tuple[RequestSpec, Route | None]:
        """Where a token's stream goes on: the upstream that was serving it (the token
        names it: its API and body are that upstream's, and only it can continue its
        offsets and event ids), then the fallbacks after it; a token of a stream without
        fallbacks goes to the client's own base URL, as it always did.

        The token's name only *chooses* among this client's upstreams (its own base URL and
        its ``fallbacks``): a name none of them has is a :class:`ResumeTokenError`, never a
        request to a URL the token holds."""
        request = settings.request(self.api, body, options.extra_headers, options.timeouts)
        label = token.get("upstream")
        if label is None:
            return request, None
        upstreams = self.upstreams(settings, options.fallbacks)
        policy = self.failover_policy(settings, options.failover)
        plan: RoutePlan = settings.route_plan(self.api, upstreams)
        targets = plan.targets(request, policy.shared_headers)
        index = next((i for i, t in enumerate(targets) if t.label == label), None)
        if index is None or targets[index].api is not self.api:
            known = ", ".join(show_key(t.label) for t in targets if t.api is self.api)
            raise ResumeTokenError(
                f"the resume token was served by an upstream this client does not have "
                f"({show_key(label) if isinstance(label, str) else type(label).__name__}); "
                f"give the client (or the resume) the same fallbacks "
                f"(its {self.api.name} upstreams: {known})"
            )
        rest = targets[index:]
        route = Route(
            rest, body, cooldown=plan.cooldown(request, policy),
            per_upstream_attempts=policy.per_upstream_attempts,
            min_overlap=resume.min_overlap, prefix_flag=dict(resume.prefix_flag),
        )
        return rest[0].request(body), route


def completing(
    stream: Callable[Concatenate[_E, _P], ReplyStream],
) -> Callable[Concatenate[_E, _P], Coroutine[Any, Any, Reply]]:
    """``complete`` for an endpoint, typed with exactly its ``stream``'s parameters.

    Written once so the endpoints' ``complete`` cannot drift from their ``stream``, and
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
