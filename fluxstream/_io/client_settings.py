"""A client's settings as one frozen value: what the endpoints read when they make a stream.

:class:`ClientSettings` is the configuration in force (policies, deadlines, limits,
observers, fallbacks, failover, the token signer, the request builder of the base URL), made
by the client when it is constructed and again whenever one of its settings is assigned, and
handed to each of its endpoints. Setting up a stream reads it once and never calls back into
the client: the next stream sees an assignment, one made before keeps what it was made with.
What depends only on the settings (each API's labels and credentials' fingerprints, the
fallbacks' request builders) is worked out once per value, not per stream.

What the client's streams share whatever its settings (the streams still open, the circuit
breaker, the fallbacks' request builders) is one :class:`ClientState`, which every value of one
client points to.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import apis
from .._core.failover import CoolDown
from .._core.headers import checked_headers
from .._core.secret import Secret
from .._core.think_tags import ThinkTags, think_tags_of
from .._core.token_signature import TokenSigner
from .._limits import StreamLimits
from .._observe import StreamObserver
from .._parser import StreamParser
from .._retry import ResumePolicy, RetryPolicy
from .._timeouts import Timeouts
from .._upstream import Failover, Upstream, place_label
from .._usage import UsageLedger
from ..apis import Api
from ..errors import show_key
from .attempt import RequestSpec
from .base_url import BaseURL
from .failover import Target
from .http_library import HttpErrors
from .request_builder import RequestBuilder

if TYPE_CHECKING:  # pragma: no cover
    from .._stream import ReplyStream

__all__ = ["ClientSettings", "ClientState", "RoutePlan", "checked_upstreams", "distinct"]

#: The most fallbacks' request builders one client keeps (calls may each name their own).
MAX_UPSTREAM_BUILDERS = 256


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


class ClientState:
    """What one client's streams share, whatever its settings when each was made: the streams
    still open (ended by ``aclose()``), the circuit breaker, and the fallbacks' request
    builders on the client's HTTP client."""

    __slots__ = ("_builders", "_cooldown", "closed", "errors", "http", "owns_http", "streams")

    def __init__(self, http: Any, errors: HttpErrors, *, owns_http: bool) -> None:
        self.http = http
        self.errors = errors
        self.owns_http = owns_http
        #: ``aclose()`` was called: every stream of the client has ended, none is opened.
        self.closed = False
        #: The client's streams, as weak references that take themselves out when their
        #: stream is collected: a set's own ``discard`` is the callback, so adopting a stream
        #: and forgetting it run no Python code (every stream pays both; a ``WeakSet`` cost
        #: two Python calls).
        self.streams: set[weakref.ref[ReplyStream]] = set()
        self._cooldown: CoolDown | None = None
        self._builders: dict[Upstream, RequestBuilder] = {}

    def adopt(self, stream: ReplyStream) -> None:
        """``stream`` is one of the client's: ended by ``aclose()``, or refused when it opens
        (before anything is sent) if the client is closed already."""
        if self.closed:
            stream._client_closed()
        else:
            streams = self.streams
            streams.add(weakref.ref(stream, streams.discard))

    def close(self) -> None:
        """End every stream of the client at once; none made after is opened."""
        self.closed = True
        for ref in list(self.streams):
            stream = ref()
            if stream is not None:
                stream._client_closed()
        self.streams.clear()

    def cooldown(self, policy: Failover) -> CoolDown:
        """The client's circuit breaker (made with the first policy that asks for one)."""
        if self._cooldown is None:
            self._cooldown = CoolDown(
                policy.cooldown_failures, policy.cooldown_window, policy.cooldown
            )
        return self._cooldown

    def requests_to(self, upstream: Upstream) -> RequestBuilder:
        """How requests to ``upstream`` are built, on the client's HTTP client (made once):
        its own URL, key and headers, never the client's; without a key of its own none is
        sent."""
        builders = self._builders
        builder = builders.get(upstream)
        if builder is None:
            if len(builders) >= MAX_UPSTREAM_BUILDERS:
                del builders[next(iter(builders))]  # it shares the pool: nothing to close
            key = Secret(upstream.api_key) if upstream.api_key else None
            builder = builders[upstream] = RequestBuilder(
                BaseURL(upstream.base_url, "base_url", None), key, upstream.header_map,
                self.http, self.errors, owns_http=self.owns_http,
            )
        return builder


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class ClientSettings:
    """A client's settings as they are when a stream is made (see the module docstring)."""

    retry: RetryPolicy
    resume: ResumePolicy
    raise_for_outcome: bool
    observers: tuple[StreamObserver, ...]
    fallbacks: tuple[Upstream, ...]
    failover: Failover
    #: Every field given: a request's own ``timeouts=`` goes over them.
    timeouts: Timeouts
    max_event_bytes: int
    require_finish_reason: bool
    stream_limits: StreamLimits | None
    #: Reasoning inside the text between tags read as reasoning (``None``: off).
    think_tags: ThinkTags | None
    usage_ledger: UsageLedger
    token_signer: TokenSigner | None = dataclasses.field(repr=False)
    #: The requests to the base URL in force, with the client's key and headers.
    requests: RequestBuilder = dataclasses.field(repr=False)
    state: ClientState = dataclasses.field(repr=False)
    #: The route of each API's streams when they take the client's fallbacks.
    _routes: dict[str, RoutePlan] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )

    def replace(self, **changes: Any) -> ClientSettings:
        """These settings with ``changes`` (what the next streams are made with)."""
        return dataclasses.replace(self, **changes)

    def parser(
        self, api: Api, content_key: str, strict: bool, tags: ThinkTags | bool | None = None
    ) -> StreamParser:
        """A parser of ``api``'s wire format for a new stream (``tags``: the call's
        ``think_tags=``, ``None`` for the client's)."""
        return StreamParser(
            content_key=content_key, format=api.name, max_event_bytes=self.max_event_bytes,
            strict=strict, require_finish_reason=self.require_finish_reason,
            limits=self.stream_limits, think_tags=self.tags_of(tags),
        )

    def token_parser(
        self, api: Api, token: Mapping[str, Any], tags: ThinkTags | bool | None = None
    ) -> StreamParser:
        """A parser that goes on from a resume token (checked by the caller)."""
        return StreamParser.from_token(
            token, format=api.name, max_event_bytes=self.max_event_bytes,
            require_finish_reason=self.require_finish_reason, limits=self.stream_limits,
            think_tags=self.tags_of(tags),
        )

    def tags_of(self, tags: ThinkTags | bool | None) -> ThinkTags | None:
        """A call's ``think_tags=`` over the client's."""
        return self.think_tags if tags is None else think_tags_of(tags)

    def request(
        self, api: Api, body: dict[str, Any], headers: Mapping[str, str] | None,
        timeouts: Timeouts | None, to: RequestBuilder | None = None,
    ) -> RequestSpec:
        """The request of ``body`` to ``api`` under the base URL in force (every attempt of
        the stream goes there: a retry or a resume never moves a reply, and the
        credentials it is sent with, to another host half-way), or ``to`` a fallback's, with
        ``headers`` of its own, under these deadlines with the fields given in ``timeouts``
        over them."""
        requests = self.requests if to is None else to
        built = requests.for_api(api)
        return RequestSpec(
            api=api,
            body=body,
            build=built.build,
            http=requests.http,
            errors=requests.errors,
            headers=checked_headers(headers, "extra_headers") if headers else {},
            timeouts=self.timeouts.merge(timeouts),
            build_get=built.build_get,
            server=requests.url.server,
            ledger=self.usage_ledger,
        )

    def route_plan(self, api: Api, upstreams: tuple[Upstream, ...]) -> RoutePlan:
        """The route of ``api``'s streams to the client's own base URL then ``upstreams``
        (worked out once for the client's own fallbacks)."""
        if upstreams is not self.fallbacks:
            return RoutePlan(self, api, upstreams)
        plan = self._routes.get(api.name)
        if plan is None:
            plan = self._routes[api.name] = RoutePlan(self, api, upstreams)
        return plan


class _Fallback:
    """One fallback as a route of one snapshot uses it: worked out once."""

    __slots__ = ("api", "identity", "label", "own", "requests", "upstream")

    def __init__(self, upstream: Upstream, requests: RequestBuilder) -> None:
        self.upstream = upstream
        self.label = upstream.label
        self.api = apis.get(upstream.api)
        self.identity = upstream.identity
        self.own = upstream.header_map
        self.requests = requests


class RoutePlan:
    """The upstreams of one API's streams: the client's own base URL first, then the
    fallbacks, their labels distinct, each one's API, request builder and identity (its
    label and a fingerprint of its credentials, as the circuit breaker counts it)."""

    __slots__ = ("_identities", "api", "fallbacks", "label", "settings")

    def __init__(self, settings: ClientSettings, api: Api, upstreams: Sequence[Upstream]) -> None:
        requests = settings.requests
        self.settings = settings
        self.api = api
        self.label = requests.label(api)
        distinct([self.label, *(u.label for u in upstreams)], own_first=True)
        state = settings.state
        self.fallbacks = tuple(_Fallback(u, state.requests_to(u)) for u in upstreams)
        self._identities = {self.label: requests.identity(api, {})}
        self._identities.update((f.label, f.identity) for f in self.fallbacks)

    def targets(self, request: RequestSpec, shared: Sequence[str]) -> list[Target]:
        """The route's targets for the stream of ``request`` (the client's own): each
        fallback's requests carry its own key and headers, and of the client's and
        ``request``'s headers only those named in ``shared``; ``request``'s deadlines, and
        its observers' part in each send (trace context)."""

        def primary(body: dict[str, Any]) -> RequestSpec:
            return dataclasses.replace(request, body=body)

        targets = [Target(self.label, self.api, None, None, primary)]
        given: dict[str, str] | None = None
        for fallback in self.fallbacks:
            carried: dict[str, str] = {}
            if shared:  # the marked headers, the request's value over the client's
                if given is None:
                    given = {**self.settings.requests.headers,
                             **{k.lower(): v for k, v in request.headers.items()}}
                carried = {name: given[name] for name in shared
                           if name in given and name not in fallback.own}
            targets.append(self._target(fallback, request, carried))
        return targets

    def _target(
        self, fallback: _Fallback, request: RequestSpec, carried: dict[str, str]
    ) -> Target:
        settings = self.settings

        def build(body: dict[str, Any]) -> RequestSpec:
            spec = settings.request(fallback.api, body, carried, request.timeouts,
                                    fallback.requests)
            spec.sending = request.sending  # trace context, added at each send
            return spec

        upstream = fallback.upstream
        return Target(fallback.label, fallback.api, upstream.model, upstream.max_tokens, build)

    def cooldown(self, request: RequestSpec, policy: Failover) -> CoolDown:
        """The client's circuit breaker as this route reads it: each label counted as its
        upstream's identity (the client's own with ``request``'s headers)."""
        identities = self._identities
        if request.headers:
            own = self.settings.requests.identity(self.api, request.headers)
            identities = {**identities, self.label: own}
        return self.settings.state.cooldown(policy).for_route(identities)
