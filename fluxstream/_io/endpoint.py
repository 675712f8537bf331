"""The one generic endpoint: a request to any registered API becomes a :class:`ReplyStream` here.

``client.chat``, ``client.responses`` and ``client.messages`` are thin typed signatures (their
parameters, their docstrings) over an :class:`Endpoint` each: what differs between them is
asked of their :class:`~fluxstream.apis.Api` (tools, structured output, retryable statuses,
the continuation flag, resume tokens), what they share is written once here. What the client
contributes (its configuration, how it builds requests and streams) comes through the small
:class:`StreamFactory` protocol, so this module never imports the client.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from .. import apis
from .._core.failover import CoolDown
from .._core.token_signature import TokenSigner
from ..apis import Api, Structured
from ..errors import ResumeTokenError, show_key
from ..observe import StreamObserver
from ..parser import StreamParser, new_content_key
from ..reply import Reply
from ..retry import ResumePolicy, RetryPolicy
from ..stream import RESUME_TOKEN_VERSION, ReplyStream
from ..timeouts import Timeouts
from ..upstream import Failover, Upstream, place_label
from .attempt import RequestSpec
from .failover import Route, Target
from .stream_objects import track

__all__ = [
    "Endpoint", "StreamFactory", "checked_upstreams", "completing", "distinct", "prepare",
]

_DEFAULT_PREFIX_FLAG = ResumePolicy().prefix_flag

_P = ParamSpec("_P")
_E = TypeVar("_E")


def checked_upstreams(upstreams: Any, base_url: str | None = None) -> tuple[Upstream, ...]:
    """``fallbacks`` as a tuple of :class:`Upstream`, or a ``TypeError`` naming what is not;
    a ``ValueError`` when two of them (or one and ``base_url``, the client's own, asked in
    the fallback's API) have one label (see :func:`distinct`)."""
    if isinstance(upstreams, (str, Upstream)) or not isinstance(upstreams, Sequence):
        raise TypeError("fallbacks is a sequence of fluxstream.Upstream")
    for upstream in upstreams:
        if not isinstance(upstream, Upstream):
            raise TypeError(
                f"fallbacks holds fluxstream.Upstream values, not {type(upstream).__name__}"
            )
    checked = tuple(upstreams)
    distinct([u.label for u in checked])
    if base_url is not None:
        for upstream in checked:
            distinct([place_label(base_url, upstream.api), upstream.label], own_first=True)
    return checked


def distinct(labels: Sequence[str], *, own_first: bool = False) -> None:
    """Refuse two upstreams of one route named alike (``own_first``: the first label is the
    client's own base URL's): a resume token, a segment and the circuit breaker could not
    tell them apart. The message names the label, never a key."""
    for index, label in enumerate(labels):
        first = labels.index(label)
        if first == index:
            continue
        which = (
            "a fallback has the label of the client's own base URL"
            if own_first and first == 0 else "two fallbacks have one label"
        )
        raise ValueError(
            f"{which}, {show_key(label)} (the same base URL and API: a second account of one"
            " provider?): resume tokens, segments and the circuit breaker know an upstream by"
            " its label, so give each fallback a distinct name= (Upstream(..., name=...))"
        )


class StreamFactory(Protocol):
    """What an endpoint needs from the client that owns it: its default policies, and the
    parser, request and stream of each request, made with the client's configuration."""

    @property
    def retry(self) -> RetryPolicy: ...

    @property
    def resume(self) -> ResumePolicy: ...

    @property
    def raise_for_outcome(self) -> bool:
        """Whether the client's streams raise at the end of iteration unless they ended
        well (a request may say otherwise)."""
        ...

    @property
    def token_signer(self) -> TokenSigner | None:
        """Signs the resume tokens of the client's streams and checks the ones it resumes
        (``None``: the client has no ``token_secret``)."""
        ...

    def parser(self, api: Api, content_key: str, *, strict: bool) -> StreamParser:
        """A parser of ``api``'s wire format for a new stream."""
        ...

    def token_parser(self, api: Api, token: Mapping[str, Any]) -> StreamParser:
        """A parser that goes on from a resume token (checked by the caller)."""
        ...

    def request(
        self, api: Api, body: dict[str, Any], headers: Mapping[str, Any],
        timeouts: Timeouts | None,
    ) -> RequestSpec:
        """The request of ``body`` to ``api`` (``headers`` as the caller gave them), under
        the client's deadlines with the fields given in ``timeouts`` over them."""
        ...

    def open(
        self, request: RequestSpec, parser: StreamParser, *, retry: RetryPolicy,
        resume: ResumePolicy, resuming: bool, route: Route | None = None,
        raise_for_outcome: bool = False,
    ) -> ReplyStream:
        """The stream of ``request`` read by ``parser``, told to the client's observers,
        moving along ``route`` when its upstream fails, its resume tokens signed with the
        client's secret, raising at the end of iteration when ``raise_for_outcome``."""
        ...

    @property
    def fallbacks(self) -> tuple[Upstream, ...]:
        """The client's fallbacks (a request may give its own)."""
        ...

    @property
    def failover(self) -> Failover: ...

    def cooldown(self, policy: Failover) -> CoolDown:
        """The client's circuit breaker."""
        ...

    def primary(self, api: Api, request: RequestSpec) -> Target:
        """The client's own base URL as the first upstream, sending ``request``'s kind."""
        ...

    def identity(self, request: RequestSpec) -> str:
        """The client's own base URL to the circuit breaker: its label and a fingerprint of
        the credentials ``request`` is sent with (see :attr:`Upstream.identity`)."""
        ...

    def target(self, upstream: Upstream, request: RequestSpec, shared: Sequence[str]) -> Target:
        """``upstream`` as a target of the stream of ``request`` (the client's own): its
        requests carry its own key and headers, and of the client's and ``request``'s
        headers only those named in ``shared``; ``request``'s deadlines, and its observers'
        part in each send (trace context)."""
        ...


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
    token."""

    def __init__(self, factory: StreamFactory, api: Api) -> None:
        self.factory = factory
        self.api = api
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
        policy = retry if retry is not None else self.factory.retry
        given, derived = self._retry
        if given is policy and derived is not None:
            return derived
        derived = policy
        extra = self.api.retry_statuses
        if extra and not extra <= policy.retry_status and policy.max_attempts > 1:
            derived = dataclasses.replace(policy, retry_status=policy.retry_status | extra)
        self._retry = (policy, derived)
        return derived

    def resume_policy(self, resume: ResumePolicy | None) -> ResumePolicy:
        """``resume`` (or the client's), whose continuation marks the appended assistant
        message the API's way (:attr:`Api.continuation_flag`), unless the caller chose a
        flag."""
        policy = resume if resume is not None else self.factory.resume
        flag = self.api.continuation_flag
        if flag is not None and policy.continuation and policy.prefix_flag == _DEFAULT_PREFIX_FLAG:
            return dataclasses.replace(policy, prefix_flag=dict(flag))
        return policy

    def stream(
        self,
        body: dict[str, Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        response_format: Any,
        log: Any,
        content_key: str | None,
        extra_headers: Mapping[str, str] | None,
        strict: bool,
        retry: RetryPolicy | None,
        resume: ResumePolicy | None,
        timeouts: Timeouts | None,
        observers: Sequence[StreamObserver],
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
    ) -> ReplyStream:
        """What every endpoint's ``stream`` does once its API's own fields are in ``body``:
        tools, structured output, ``stream: true``, then the stream (opened lazily) under
        ``timeouts`` over the client's, told to the client's ``observers`` then the call's,
        moving to ``fallbacks`` (the client's when ``None``) when its upstream fails, raising
        at the end of iteration unless it ended well when ``raise_for_outcome`` (the
        client's when ``None``)."""
        api = self.api
        if tools is not None:
            api.add_tools(body, tools)
        structured = api.structured_request(body, response_format)
        body["stream"] = True
        factory = self.factory
        parser = factory.parser(api, content_key or new_content_key(), strict=strict)
        request = factory.request(api, body, extra_headers or {}, timeouts)
        resume_policy = self.resume_policy(resume)
        route = self.route(request, fallbacks, failover, resume_policy)
        stream = factory.open(
            request, parser, retry=self.retry_policy(retry), resume=resume_policy,
            resuming=False, route=route,
            raise_for_outcome=self.raises_for_outcome(raise_for_outcome),
        )
        return prepare(stream, structured, log, observers)

    def raises_for_outcome(self, raise_for_outcome: bool | None) -> bool:
        """``raise_for_outcome`` (checked), or the client's."""
        if raise_for_outcome is None:
            return self.factory.raise_for_outcome
        if not isinstance(raise_for_outcome, bool):
            raise TypeError(
                f"raise_for_outcome is True, False or None, not {type(raise_for_outcome).__name__}"
            )
        return raise_for_outcome

    def route(
        self, request: RequestSpec, fallbacks: Sequence[Upstream] | None,
        failover: Failover | None, resume: ResumePolicy,
    ) -> Route | None:
        """The upstreams of a request: the client's own, then ``fallbacks`` (``None`` when
        there are none: the stream is exactly what it is without failover)."""
        factory = self.factory
        upstreams = factory.fallbacks if fallbacks is None else checked_upstreams(fallbacks)
        if not upstreams:
            return None
        policy = self.failover_policy(failover)
        targets, cooldown = self.targets(request, upstreams, policy)
        return Route(
            targets, request.body, cooldown=cooldown,
            per_upstream_attempts=policy.per_upstream_attempts,
            min_overlap=resume.min_overlap, prefix_flag=dict(resume.prefix_flag),
            hedge_after=policy.hedge_after,
        )

    def targets(
        self, request: RequestSpec, upstreams: Sequence[Upstream], policy: Failover
    ) -> tuple[list[Target], CoolDown]:
        """The targets of a route (the client's own base URL first, then ``upstreams``),
        their labels distinct, and the circuit breaker as this route reads it (each label
        counted as its upstream's identity)."""
        factory = self.factory
        targets = [factory.primary(self.api, request)]
        distinct([targets[0].label, *(u.label for u in upstreams)], own_first=True)
        targets += [factory.target(u, request, policy.shared_headers) for u in upstreams]
        identities = {targets[0].label: factory.identity(request)}
        identities.update((u.label, u.identity) for u in upstreams)
        return targets, factory.cooldown(policy).for_route(identities)

    def failover_policy(self, failover: Failover | None) -> Failover:
        """``failover`` (checked), or the client's."""
        if failover is None:
            return self.factory.failover
        if not isinstance(failover, Failover):
            raise TypeError(f"failover is a Failover, not {type(failover).__name__}")
        return failover

    def resume(
        self,
        token: Mapping[str, Any],
        *,
        extra_headers: Mapping[str, str] | None,
        resume: ResumePolicy | None,
        retry: RetryPolicy | None,
        response_format: Any,
        timeouts: Timeouts | None,
        observers: Sequence[StreamObserver],
        fallbacks: Sequence[Upstream] | None = None,
        failover: Failover | None = None,
        raise_for_outcome: bool | None = None,
    ) -> ReplyStream:
        """The one way a resume token becomes a stream: signed with one of the client's
        secrets when it has a ``token_secret`` (checked first, before any part is read), of
        this API (:func:`fluxstream.apis.for_token`), or of the API of one of this client's
        ``fallbacks`` (the client's when ``None``) that the token names as serving it, and
        of this version; its partial reply and offsets are taken over by a parser of that
        API's wire format, and its body is sent again to that API's own path, moving along
        the upstreams after it (under ``failover``) when it fails."""
        signer = self.factory.token_signer
        if signer is not None:
            signer.verify(token)
        api = self.api
        named = apis.for_token(token)  # refuses a token that is no mapping
        if named is not api:
            # A reply another upstream was continuing (of another API) resumes there, read as
            # that API's wire format: only among this client's own upstreams of that API.
            upstreams = self.factory.fallbacks if fallbacks is None else checked_upstreams(
                fallbacks)
            label = token.get("upstream")
            if not any(u.label == label and u.api == named.name for u in upstreams):
                raise ResumeTokenError(
                    f"the resume token is of another API ({named.name!r}, not {api.name!r}):"
                    f" resume it with client.{named.endpoint}.resume"
                )
            return Endpoint(self.factory, named).resume(
                token, extra_headers=extra_headers, resume=resume, retry=retry,
                response_format=response_format, timeouts=timeouts, observers=observers,
                fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
            )
        if token.get("version") != RESUME_TOKEN_VERSION:
            raise ResumeTokenError(f"unsupported resume token version {token.get('version')!r}")
        if not isinstance(token.get("body"), Mapping):
            raise ResumeTokenError("the resume token has no request 'body' to send again")
        factory = self.factory
        parser = factory.token_parser(api, token)
        resume_policy = self.resume_policy(resume)
        request, route = self.resume_route(
            token, dict(token["body"]), extra_headers or {}, timeouts, resume_policy,
            fallbacks=fallbacks, failover=failover,
        )
        stream = factory.open(
            request, parser, retry=self.retry_policy(retry), resume=resume_policy,
            resuming=True, route=route,
            raise_for_outcome=self.raises_for_outcome(raise_for_outcome),
        )
        return prepare(stream, api.structured(response_format), None, observers)

    def resume_route(
        self, token: Mapping[str, Any], body: dict[str, Any], headers: Mapping[str, str],
        timeouts: Timeouts | None, resume: ResumePolicy, *,
        fallbacks: Sequence[Upstream] | None = None, failover: Failover | None = None,
    ) -> tuple[RequestSpec, Route | None]:
        """Where a token's stream goes on: the upstream that was serving it (the token
        names it: its API and body are that upstream's, and only it can continue its
        offsets and event ids), then the fallbacks after it; a token of a stream without
        fallbacks goes to the client's own base URL, as it always did.

        The token's name only *chooses* among this client's upstreams (its own base URL and
        its ``fallbacks``): a name none of them has is a :class:`ResumeTokenError`, never a
        request to a URL the token holds."""
        factory = self.factory
        request = factory.request(self.api, body, headers, timeouts)
        label = token.get("upstream")
        if label is None:
            return request, None
        upstreams = factory.fallbacks if fallbacks is None else checked_upstreams(fallbacks)
        policy = self.failover_policy(failover)
        targets, cooldown = self.targets(request, upstreams, policy)
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
            rest, body, cooldown=cooldown,
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
