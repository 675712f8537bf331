"""``AsyncClient``: the object services hold. Configuration, requests, nothing else.

It follows the ecosystem's conventions: ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` when not given,
an injected ``httpx.AsyncClient`` (or ``httpx2.AsyncClient``, or ``httpx_aiohttp``'s client)
used as it is and never closed by us, ``httpx.Timeout`` for connect/read/write/pool, stdlib
``logging`` under the ``fluxstream`` logger.

The API key is kept in a :class:`Secret`, whose ``repr`` and ``str`` are masked; it is only
turned into a header when a request is built, and error messages are built from responses,
never from requests.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import ipaddress
import json
import logging
import os
import re
import weakref
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar

import httpx
import msgspec

from . import apis
from ._core.failover import CoolDown
from ._core.headers import CREDENTIAL_NAME
from ._core.headers import checked_headers as checked_headers
from ._core.headers import header_safe as _header_safe
from ._core.token_signature import TokenSigner
from ._io.default_client import make_http_client
from ._io.endpoint import Endpoint, checked_upstreams, completing
from ._io.failover import Route, Target
from ._io.http_library import HttpErrors
from .apis import Api, bearer
from .apis.anthropic_messages import ANTHROPIC_MESSAGES
from .apis.chat_completions import CHAT_COMPLETIONS, with_usage
from .apis.gemini import GEMINI
from .apis.responses import RESPONSES
from .errors import MissingAPIKeyError, show_key
from .limits import StreamLimits
from .observe import StreamObserver
from .parser import StreamParser
from .retry import ResumePolicy, RetryPolicy
from .sse import DEFAULT_MAX_EVENT_BYTES
from .stream import ReplyStream, RequestSpec
from .timeouts import DEFAULT_TIMEOUTS, HTTP_FIELDS, Timeouts
from .upstream import Failover, Upstream, credential_headers, fingerprint, place_label
from .usage import ModelPrice, UsageLedger

__all__ = ["DEFAULT_TIMEOUT", "AsyncClient", "Chat", "Secret"]

logger = logging.getLogger("fluxstream")

#: Connect fast, but allow long gaps between bytes: reasoning models think silently for minutes
#: (the HTTP fields of :data:`~fluxstream.timeouts.DEFAULT_TIMEOUTS`: 10, 600, 60 and 60 s).
DEFAULT_TIMEOUT = httpx.Timeout(
    connect=DEFAULT_TIMEOUTS.connect, read=DEFAULT_TIMEOUTS.read,
    write=DEFAULT_TIMEOUTS.write, pool=DEFAULT_TIMEOUTS.pool,
)
#: One client must serve hundreds of concurrent streams; httpx's default pool allows 100.
DEFAULT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
_USER_AGENT = "fluxstream/0.1"
#: The most fallbacks' request builders one client keeps (see ``AsyncClient._client_for``).
_MAX_UPSTREAM_CLIENTS = 256
#: The standard library's encoder, for what msgspec refuses (see :func:`encode_body`).
_JSON = json.JSONEncoder(separators=(",", ":"))
_encode = msgspec.json.Encoder().encode


def encode_body(body: Mapping[str, Any]) -> bytes:
    """A request body as compact JSON bytes.

    msgspec's encoder, because every request pays this before its first byte is sent: on a
    cold cache (a c=1 stream after waiting on the network) it costs ~14 µs where the
    standard library's costs ~40-70 µs. Anything it refuses (an integer beyond 64 bits, a
    type only ``json`` knows) goes through ``json`` as before, with its own errors.
    """
    try:
        return _encode(body)
    except (TypeError, OverflowError, msgspec.EncodeError):
        return _JSON.encode(body).encode()


class _NotGiven:
    """The type of "argument not given" (``None`` means "no timeout" here). Its repr is
    what ``help()`` shows as the default, as openai-python's ``NOT_GIVEN``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()


class Secret:
    """A string that never shows itself in a repr, a log line or an exception's text."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)


class AsyncClient:
    """An async session for streaming chat replies from an OpenAI-style endpoint.

    :param base_url: e.g. ``"https://api.openai.com/v1"``; with or without a trailing slash.
        Falls back to ``OPENAI_BASE_URL``, then to OpenAI's. A query
        (``...?api-version=...``) is kept after each request's path. Credentials in it
        (``http://user:pw@host/v1``) are sent as Basic authentication in place of the key, as
        httpx does, and are never handed to the HTTP library inside a URL (its log would
        show them); ``client.base_url`` is the URL without them. Each API's requests go
        under it as that API's SDK takes a base URL (``client.messages``: ``/v1`` added when
        missing; ``client.gemini``: ``/v1beta`` when it ends in no version;
        :meth:`~fluxstream.apis.Api.root_url`).
    :param api_key: falls back to ``OPENAI_API_KEY``. With neither, the client is refused
        (:class:`~fluxstream.errors.MissingAPIKeyError`, naming the variable) unless it needs
        no key: a loopback ``base_url`` (127.0.0.0/8, ::1, ``localhost``), credentials in it
        (``user:pw@``) or in ``headers=`` (``Authorization``, ``api-key``, ``x-api-key``...).
        ``api_key=""`` sends none on purpose (a gateway that needs none).
    :param http_client: your own ``httpx.AsyncClient`` (pooling, proxies, transports); used as
        it is and never closed by fluxstream.
    :param transport: for the client fluxstream creates (ignored when ``http_client`` is
        given): ``"auto"`` (default) uses aiohttp when the event loop is asyncio and httpx
        elsewhere (trio) or when a proxy is set in the environment; ``"httpx"`` always httpx;
        ``"aiohttp"`` always aiohttp (asyncio only). aiohttp costs several times less CPU per
        delta with hundreds of concurrent streams (``benchmarks/README.md``, "Transport").
    :param limits: the pool of the client fluxstream creates (default
        :data:`DEFAULT_LIMITS`: 1,000 connections, all kept alive).
    :param timeout: an ``httpx.Timeout`` or seconds, for connect/write/pool and, unless
        ``idle_timeout`` is given, for the gap between reads. Not given: the injected
        ``http_client``'s own timeouts, or :data:`DEFAULT_TIMEOUT` for a client we create.
    :param idle_timeout: seconds without any byte before the stream ends with
        :class:`~fluxstream.errors.IdleTimeoutError`.
    :param stall_timeout: seconds between two pieces of content (from the first content on)
        in which bytes may arrive (heartbeats, comments, usage) without any content before the
        stream ends with :class:`~fluxstream.errors.StallTimeoutError`. It does not count
        before the first content: reading a long prompt is not a stall.
    :param first_token_timeout: seconds from the request to the first content (text,
        reasoning, refusal or tool-call arguments) before the stream ends with
        :class:`~fluxstream.errors.FirstTokenTimeoutError`; also bounds the wait for the
        response head.
    :param finish_grace: once every choice has a finish reason, how long to wait for more
        (the usage chunk, the sentinel) before ending the stream ``finished``: some servers
        never send ``[DONE]`` and keep the connection open. ``None`` waits for the server.
    :param timeouts: every deadline above as one :class:`~fluxstream.timeouts.Timeouts`
        (``connect``, ``read``, ``write``, ``pool``, ``idle``, ``stall``, ``first_token``,
        ``finish_grace``); the keywords above are shorthands for its fields. A keyword left at
        its default says nothing; one set together with a ``timeouts`` that gives the same
        field is a ``TypeError`` (which one is meant is not guessed). Each request may
        override fields with its own ``timeouts=``.
    :param headers: extra headers for every request. A credential among them (a name with
        ``auth``, ``key``, ``token``, ``secret``, ``cookie``, ``session``... as
        ``Authorization``, ``x-api-key``, ``api-key``, ``Proxy-Authorization``, ``Cookie``)
        is treated as ``api_key`` is: surrounding whitespace dropped, and any other character
        a header cannot carry refused here with a ``ValueError`` that does not show it. They
        are this base URL's: a fallback never gets them, unless
        ``Failover(shared_headers=...)`` names them (never a credential).
    :param default_query: query parameters sent with every request (Azure's
        ``{"api-version": ...}``), after those of ``base_url``'s own query, which keeps
        following the path; a name in both is sent with this value.
    :param max_event_bytes: the largest SSE event accepted (default 16 MiB).
    :param require_finish_reason: ``[DONE]`` when no choice has a finish reason ends
        ``truncated``; pass ``False`` for servers that never send finish reasons.
    :param stream_limits: caps on server-controlled input
        (:class:`~fluxstream.limits.StreamLimits`: choices, tool calls, reply size, bytes
        without an event).
    :param retry: retries before any content (:class:`~fluxstream.retry.RetryPolicy`; pass
        ``RetryPolicy.off()`` to disable).
    :param resume: what to do when a stream drops after content arrived
        (:class:`~fluxstream.retry.ResumePolicy`; ``Last-Event-ID`` by default).
    :param observers: :class:`~fluxstream.observe.StreamObserver` s told when each stream
        of this client opens, of every event it delivers, and once when it ends (tracing,
        metrics); a call's own ``observers=`` come after these.
    :param prices: :class:`~fluxstream.usage.ModelPrice` per model name (per million
        tokens; no table is shipped): each reply of a priced model gets ``reply.cost``
        (a ``Decimal``), from its usage or, when the server reported none, its
        ``usage_estimate`` (:mod:`fluxstream.usage`).
    :param fallbacks: :class:`~fluxstream.upstream.Upstream` s asked in order when this
        client's own ``base_url`` fails, before the reply started (a retryable failure, once
        ``failover.per_upstream_attempts`` are spent) or after (once its own resume
        strategies are spent: the reply is continued there). A request may give its own. Each
        is sent its own key and headers only; two with one label (one URL and API, or this
        client's own base URL) are a ``ValueError`` asking for a ``name=``.
    :param failover: when to move on, and the circuit breaker
        (:class:`~fluxstream.upstream.Failover`; its cool-downs are this client's).
    :param raise_for_outcome: ``True``: a stream that did not end well (``truncated``,
        ``failed``, ``cancelled``) raises at the end of its ``async for`` (and ``text()``,
        ``objects()``) what :meth:`~fluxstream.reply.Reply.raise_for_outcome` raises, after
        its last event and after the observers were told of the end, as the official SDKs
        raise on a cut stream. ``False`` (default): iteration ends quietly and
        ``stream.reply.outcome`` says how. A request may say otherwise
        (``raise_for_outcome=`` of ``stream`` and ``resume``).
    :param token_secret: a secret (at least 16 characters), or several (the first signs, any
        verifies: rotate keys by putting the new one first), for resume tokens that pass
        through browsers or other untrusted hands: every token this client's streams issue
        is signed (HMAC-SHA256), and ``resume()`` refuses an unsigned or altered token with
        :class:`~fluxstream.errors.ResumeTokenError` before anything is sent. Kept like
        ``api_key``: never in a repr, a log line or an error.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        http_client: Any = None,
        transport: str = "auto",
        limits: httpx.Limits | None = None,
        timeout: httpx.Timeout | float | _NotGiven | None = NOT_GIVEN,
        idle_timeout: float | None = None,
        stall_timeout: float | None = None,
        first_token_timeout: float | None = None,
        finish_grace: float | None = 2.0,
        timeouts: Timeouts | None = None,
        headers: Mapping[str, str] | None = None,
        default_query: Mapping[str, str | int | float | bool] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        require_finish_reason: bool = True,
        stream_limits: StreamLimits | None = None,
        retry: RetryPolicy | None = None,
        resume: ResumePolicy | None = None,
        observers: Sequence[StreamObserver] = (),
        prices: Mapping[str, ModelPrice] | None = None,
        fallbacks: Sequence[Upstream] = (),
        failover: Failover | None = None,
        raise_for_outcome: bool = False,
        token_secret: str | Sequence[str] | None = None,
    ) -> None:
        source = "base_url" if base_url else "base_url (from OPENAI_BASE_URL)"
        base = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self._default_query = default_query
        self._url = _BaseURL(base, source, default_query)
        variable = CHAT_COMPLETIONS.api_key_variable
        key = api_key if api_key is not None else os.environ.get(variable)
        self._api_key = Secret(_header_safe(key, "api_key", "the key")) if key else None
        #: The variable a key would come from, while this client has none and was not told
        #: to go without (``api_key=""``): a base URL that needs a key is refused.
        self._unkeyed = variable if not key and api_key is None else None
        self._timeouts = _configured_timeouts(
            timeouts, timeout, http_client, idle_timeout=idle_timeout,
            stall_timeout=stall_timeout, first_token_timeout=first_token_timeout,
            finish_grace=finish_grace,
        )
        self.max_event_bytes = max_event_bytes
        self.require_finish_reason = require_finish_reason
        self.stream_limits = stream_limits
        self.retry = retry if retry is not None else RetryPolicy()
        self.resume = resume if resume is not None else ResumePolicy()
        #: Told of every stream of this client (:mod:`fluxstream.observe`), first.
        self.observers: tuple[StreamObserver, ...] = tuple(observers)
        #: Settles every reply's usage estimate and cost when its stream ends.
        self.usage_ledger = UsageLedger(prices)
        #: Where a stream goes when this client's own base URL fails (see ``fallbacks``).
        self.fallbacks: tuple[Upstream, ...] = checked_upstreams(fallbacks, self.base_url)
        self.failover = failover if failover is not None else Failover()
        if not isinstance(self.failover, Failover):
            raise TypeError(f"failover is a Failover, not {type(failover).__name__}")
        self._cooldown: CoolDown | None = None
        self._upstream_clients: dict[Upstream, AsyncClient] = {}
        if not isinstance(raise_for_outcome, bool):
            raise TypeError(
                f"raise_for_outcome is True or False, not {type(raise_for_outcome).__name__}")
        #: Whether this client's streams raise at the end of iteration unless they ended
        #: well (see the ``raise_for_outcome`` parameter); assignable.
        self.raise_for_outcome = raise_for_outcome
        self._token_signer = _token_signer(token_secret)
        self._headers = {
            name.lower(): value for name, value in checked_headers(headers, "headers").items()
        }
        self._check_key(self._url)
        # Merged once: most requests add no headers of their own (see ``_build_request``).
        # Without the key: it is revealed only when a request is built.
        self._post_headers = self._merge_headers(True, {})
        self._get_headers = self._merge_headers(False, {})
        #: The same, with each API's own headers (Anthropic's version pin), made on the
        #: API's first request: ``(post, API name) -> headers``, without credentials.
        self._api_headers: dict[tuple[bool, str], dict[str, str]] = {}
        #: How each API's requests are built under the base URL in force (see
        #: ``_StreamFactory.request``): made once, not per stream.
        self._builders: dict[str, _RequestBuilders] = {}
        #: The HTTP library's keywords for the deadlines of the latest request built
        #: (``Timeouts`` are immutable: the same object, the same keywords).
        self._http_timeouts: tuple[Timeouts | None, dict[str, Any]] = (None, {})
        #: The key is added to requests with none of their own (see ``_build_request``).
        self._sends_key = bool(self._api_key) and not _carries_key(self._headers)
        self._owns_http = http_client is None
        #: ``aclose()`` was called: every stream of this client has ended, none is opened.
        self._closed = False
        #: The streams made by this client, ended by ``aclose()`` (see ``_StreamFactory``).
        self._streams: weakref.WeakSet[ReplyStream] = weakref.WeakSet()
        if http_client is None:
            http_client = make_http_client(
                transport, DEFAULT_TIMEOUT, limits if limits is not None else DEFAULT_LIMITS
            )
        self._http = http_client
        self._errors = HttpErrors.for_client(http_client)
        factory = _StreamFactory(self)
        #: One generic endpoint per registered API; the typed signatures below use theirs.
        self._endpoints = {api.name: Endpoint(factory, api) for api in apis.registered()}
        self._chat = Chat(self)
        self._responses = Responses(self)
        self._messages = Messages(self)
        self._gemini = Gemini(self)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<fluxstream.AsyncClient base_url={_safe_url(self.base_url)!r} api_key={key}>"

    # Properties rather than attributes set in ``__init__``: ``help(AsyncClient)`` lists them
    # with their docstrings, and they cannot be replaced by mistake.
    @property
    def chat(self) -> Chat:
        """Chat Completions streaming (``POST {base_url}/chat/completions``):
        ``stream``, ``complete`` and ``resume`` (:class:`Chat`)."""
        return self._chat

    @property
    def responses(self) -> Responses:
        """OpenAI Responses API streaming (``POST {base_url}/responses``): ``stream``,
        ``complete`` and ``resume`` (:class:`~fluxstream.endpoints.Responses`)."""
        return self._responses

    @property
    def messages(self) -> Messages:
        """Anthropic Messages streaming (``POST {base_url}/v1/messages``, ``/v1`` once):
        ``stream``, ``complete`` and ``resume`` (:class:`~fluxstream.endpoints.Messages`)."""
        return self._messages

    @property
    def gemini(self) -> Gemini:
        """Google Gemini streaming (``POST {base_url}/models/{model}:streamGenerateContent
        ?alt=sse``): ``stream``, ``complete`` and ``resume`` (:class:`Gemini`)."""
        return self._gemini

    @property
    def base_url(self) -> str:
        """The API root as given, without credentials (and with its query, if any).

        Assigning it is taken as the constructor takes ``base_url`` (checked, credentials
        taken out, ``default_query`` joined): the streams made after it, and their key, go
        there; a stream made before keeps its host for all its attempts (a retry or a resume
        never moves a reply to another host half-way), as openai-python and httpx do."""
        return self._url.shown

    @base_url.setter
    def base_url(self, value: str) -> None:
        url = _BaseURL(value, "base_url", self._default_query)
        self._check_key(url)
        self._url = url

    def _check_key(self, url: _BaseURL) -> None:
        """Refuse a client with no key, none on purpose, for a server that needs one (see
        :func:`keyless`): every request would go out unauthenticated."""
        variable = self._unkeyed
        if variable is not None and _needs_key(url, self._headers):
            raise MissingAPIKeyError(variable, _safe_url(url.shown))

    @property
    def timeouts(self) -> Timeouts:
        """Every deadline of this client's streams, each field given
        (:class:`~fluxstream.timeouts.Timeouts`); a request's ``timeouts=`` goes over it."""
        return self._timeouts

    # The shorthands of the constructor's timeout keywords. Assigning one replaces the
    # client's ``timeouts`` with that field changed, checked as the keyword is; the streams
    # made after it use it.

    @property
    def timeout(self) -> httpx.Timeout:
        """The HTTP library's timeouts (``timeouts``' connect, read, write and pool);
        assigning an ``httpx.Timeout`` or seconds sets those four fields."""
        t = self._timeouts
        return httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool)

    @timeout.setter
    def timeout(self, value: httpx.Timeout | float | None) -> None:
        self._timeouts = self._timeouts.replace(**_shorthand_fields("timeout", value))

    @property
    def idle_timeout(self) -> float | None:
        """``timeouts.idle``; without it nor a read timeout, the stall timeout (a silent
        socket must not outlive a stalled stream). Assigning it sets ``timeouts.idle``."""
        t = self._timeouts
        return t.idle if t.idle is not None or t.read is not None else t.stall

    @idle_timeout.setter
    def idle_timeout(self, value: float | None) -> None:
        self._timeouts = self._timeouts.replace(**_shorthand_fields("idle_timeout", value))

    @property
    def stall_timeout(self) -> float | None:
        """``timeouts.stall``: seconds between two pieces of content (assignable)."""
        return self._timeouts.stall

    @stall_timeout.setter
    def stall_timeout(self, value: float | None) -> None:
        self._timeouts = self._timeouts.replace(**_shorthand_fields("stall_timeout", value))

    @property
    def first_token_timeout(self) -> float | None:
        """``timeouts.first_token``: seconds from the request to the first content
        (assignable)."""
        return self._timeouts.first_token

    @first_token_timeout.setter
    def first_token_timeout(self, value: float | None) -> None:
        self._timeouts = self._timeouts.replace(
            **_shorthand_fields("first_token_timeout", value)
        )

    @property
    def finish_grace(self) -> float | None:
        """``timeouts.finish_grace``: the wait for the sentinel once every choice finished
        (assignable)."""
        return self._timeouts.finish_grace

    @finish_grace.setter
    def finish_grace(self, value: float | None) -> None:
        self._timeouts = self._timeouts.replace(**_shorthand_fields("finish_grace", value))

    @property
    def read_timeout(self) -> float | None:
        """Seconds allowed between two reads (``idle_timeout``, else the read timeout)."""
        return self._timeouts.read_gap

    @property
    def http_client(self) -> Any:
        """The caller's ``http_client``, or the one fluxstream created: with
        ``transport="auto"`` an internal object with httpx's ``build_request``/``send``
        convention (aiohttp on asyncio, ``httpx.AsyncClient`` elsewhere)."""
        return self._http

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End every stream of this client, at once, and close the HTTP client if fluxstream
        created it (a caller's own is left open, for its other users). Nothing more is sent
        by this client: no retry, resume or failover of its streams, and a stream opened
        after raises ``APIConnectionError``. A stream that has its response ends
        ``truncated`` (cause ``APIConnectionError``), one still waiting for it raises that
        error; either way its observers see the end."""
        self._closed = True
        for stream in list(self._streams):
            stream._client_closed()
        self._streams.clear()
        if self._owns_http:
            await self._http.aclose()

    # ------------------------------------------------------------------ upstreams

    def _cooldown_for(self, policy: Failover) -> CoolDown:
        """This client's circuit breaker (made with the first policy that asks for one)."""
        if self._cooldown is None:
            self._cooldown = CoolDown(
                policy.cooldown_failures, policy.cooldown_window, policy.cooldown
            )
        return self._cooldown

    def _client_for(self, upstream: Upstream) -> AsyncClient:
        """A client of ``upstream`` on this client's connection pool and settings (made
        once): it builds the requests sent there (URL, key, headers). Its key and headers are
        the upstream's own, never this client's: without a key of its own none is sent (an
        empty ``api_key`` reads no environment variable)."""
        subs = self._upstream_clients
        sub = subs.get(upstream)
        if sub is None:
            if len(subs) >= _MAX_UPSTREAM_CLIENTS:  # calls may each name their own upstreams
                del subs[next(iter(subs))]  # it shares the pool: nothing to close
            sub = subs[upstream] = AsyncClient(
                upstream.base_url, api_key=upstream.api_key or "", http_client=self._http,
                timeouts=self._timeouts, headers=upstream.header_map,
                max_event_bytes=self.max_event_bytes,
                require_finish_reason=self.require_finish_reason,
                stream_limits=self.stream_limits,
            )
        return sub

    # ------------------------------------------------------------------ request building

    def _build_get(
        self, path: str, headers: Mapping[str, str], timeouts: Timeouts | None = None, *,
        api: Api | None = None, url: _BaseURL | None = None,
    ) -> Any:
        """A ``GET`` of ``path`` (query included), authenticated like the stream's requests:
        the Responses API's resume re-reads a stored response this way."""
        return self._build_request(path, None, headers, timeouts, api=api, url=url)

    def _merge_headers(
        self, post: bool, headers: Mapping[str, str], *, api: Api | None = None
    ) -> dict[str, str]:
        """The headers of a request, without credentials: ours, the client's, then the
        request's own (over the API's own, such as a version pin)."""
        # Header names are case-insensitive: merge them lowercased, so a caller's own
        # Authorization (a proxy's token) replaces ours instead of being sent beside it.
        return {
            "accept": "text/event-stream",
            **({"content-type": "application/json"} if post else {}),
            "user-agent": _USER_AGENT,
            **self._headers,
            **(api.headers if api is not None else {}),
            **{name.lower(): value for name, value in headers.items()},
        }

    def _stock_headers(self, post: bool, api: Api | None) -> dict[str, str]:
        """The headers of a request that adds none of its own, without credentials, merged
        once per client and API (shared: never changed after)."""
        if api is None or not api.headers:
            return self._post_headers if post else self._get_headers
        merged = self._api_headers.get((post, api.name))
        if merged is None:
            merged = self._api_headers[(post, api.name)] = self._merge_headers(post, {}, api=api)
        return merged

    def _authenticate(self, headers: dict[str, str], api: Api | None, url: _BaseURL) -> None:
        """Add the credentials to ``headers`` (lowercased), revealed only now: the key as the
        API sends it (a Bearer token unless ``api`` says otherwise) unless a header already
        carries a key, and ``url``'s credentials as Basic authentication in place of any
        other ``Authorization`` (httpx's rule for a URL with credentials)."""
        key = self._api_key
        if key and not _carries_key(headers):
            name, value = (api.credential if api is not None else bearer)(key.reveal())
            headers[name] = value
        if url.auth is not None:
            headers["authorization"] = url.auth.reveal()

    def _build_request(
        self,
        path: str,
        body: Mapping[str, Any] | None,
        headers: Mapping[str, str],
        timeouts: Timeouts | None = None,
        *,
        api: Api | None = None,
        url: _BaseURL | None = None,
    ) -> Any:
        """The stream's ``POST`` of ``body`` (a ``GET`` when ``body`` is ``None``), to
        ``api`` (``None``: an API that takes the key as a Bearer token and adds no header)
        under ``url`` (the client's base URL as ``api``'s root when ``None``), under the
        HTTP timeouts of ``timeouts`` (the request's; the client's when ``None``)."""
        if url is None:
            url = self._url if api is None else self._url.for_api(api)
        if headers:
            all_headers = self._merge_headers(body is not None, headers, api=api)
            self._authenticate(all_headers, api, url)
        else:  # the usual case: only the client's own headers (and the API's), merged once
            all_headers = self._stock_headers(body is not None, api)
            if self._sends_key or url.auth is not None:
                all_headers = dict(all_headers)
                self._authenticate(all_headers, api, url)
        t = self._timeouts if timeouts is None else timeouts
        last = self._http_timeouts
        if last[0] is t:  # the usual case: the same deadlines as the stream before
            extra = last[1]
        else:
            extra = {}
            # A plain tuple, not an httpx.Timeout: httpx2 and other forks accept it too.
            # Left out when it is what the client we created has anyway (the usual case).
            limits = (t.connect, t.read_gap, t.write, t.pool)
            if not self._owns_http or limits != _CREATED_WITH:
                extra["timeout"] = limits
            self._http_timeouts = (t, extra)
        if body is not None and api is not None:
            path, body = api.target(path, body)  # Gemini: the model goes in the path
        content = None if body is None else encode_body(body)
        return self._http.build_request(
            "GET" if body is None else "POST",
            url.join(path),
            content=content,
            headers=all_headers,
            **extra,
        )


def request_for(
    client: AsyncClient, api: Api, body: Mapping[str, Any], headers: Mapping[str, str]
) -> Any:
    """The HTTP library's request of ``body`` to ``api``'s path, built and authenticated as a
    stream's (for a caller that sends it itself: ``fluxstream capture`` records the raw
    response)."""
    return client._build_request(api.path, body, checked_headers(headers, "headers"), api=api)


class _RequestBuilders:
    """How a client builds the requests of one API to one base URL (a stream's ``build`` and
    ``build_get``): made on the first stream there and shared by the next ones, since
    nothing in them is a request's own (the path, body, headers and timeouts are their
    arguments). ``url`` is the client's base URL; requests go under it as the API's root
    (:meth:`_BaseURL.for_api`)."""

    __slots__ = ("api", "build", "build_get", "url")

    def __init__(self, client: AsyncClient, api: Api, base: _BaseURL) -> None:
        self.api = api
        self.url = base
        url = base.for_api(api)
        make = client._build_request

        def build(
            path: str, body: Mapping[str, Any], headers: Mapping[str, str], timeouts: Timeouts
        ) -> Any:
            return make(path, body, headers, timeouts, api=api, url=url)

        def build_get(path: str, headers: Mapping[str, str], timeouts: Timeouts) -> Any:
            return make(path, None, headers, timeouts, api=api, url=url)

        self.build = build
        self.build_get = build_get


class _StreamFactory:
    """What the generic endpoints (:class:`~fluxstream._io.endpoint.Endpoint`) take from the
    client: its policies and configuration, read when a stream is made (so a client whose
    settings change makes the next stream with the new ones)."""

    __slots__ = ("client",)

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    @property
    def retry(self) -> RetryPolicy:
        return self.client.retry

    @property
    def resume(self) -> ResumePolicy:
        return self.client.resume

    @property
    def raise_for_outcome(self) -> bool:
        return self.client.raise_for_outcome

    @property
    def token_signer(self) -> TokenSigner | None:
        return self.client._token_signer

    def parser(self, api: Api, content_key: str, *, strict: bool) -> StreamParser:
        client = self.client
        return StreamParser(
            content_key=content_key, format=api.name,
            max_event_bytes=client.max_event_bytes, strict=strict,
            require_finish_reason=client.require_finish_reason, limits=client.stream_limits,
        )

    def token_parser(self, api: Api, token: Mapping[str, Any]) -> StreamParser:
        client = self.client
        return StreamParser.from_token(
            token, format=api.name, max_event_bytes=client.max_event_bytes,
            require_finish_reason=client.require_finish_reason, limits=client.stream_limits,
        )

    def request(
        self, api: Api, body: dict[str, Any], headers: Mapping[str, Any],
        timeouts: Timeouts | None,
    ) -> RequestSpec:
        client = self.client
        # Every attempt of the stream goes to the base URL in force now: a retry or a resume
        # never moves a reply (and the credentials it is sent with) to another host half-way.
        url = client._url
        builders = client._builders.get(api.name)
        if builders is None or builders.url is not url or builders.api is not api:
            builders = client._builders[api.name] = _RequestBuilders(client, api, url)
        return RequestSpec(
            api=api,
            body=body,
            build=builders.build,
            http=client._http,
            errors=client._errors,
            headers=checked_headers(headers, "extra_headers") if headers else {},
            timeouts=client._timeouts.merge(timeouts),
            build_get=builders.build_get,
            server=url.server,
            ledger=client.usage_ledger,
        )

    @property
    def fallbacks(self) -> tuple[Upstream, ...]:
        return self.client.fallbacks

    @property
    def failover(self) -> Failover:
        return self.client.failover

    def cooldown(self, policy: Failover) -> CoolDown:
        return self.client._cooldown_for(policy)

    def primary(self, api: Api, request: RequestSpec) -> Target:
        client = self.client

        def build(body: dict[str, Any]) -> RequestSpec:
            return dataclasses.replace(request, body=body)

        return Target(place_label(client.base_url, api.name), api, None, None, build)

    def _given_headers(self, request: RequestSpec) -> dict[str, str]:
        """The headers the client's own base URL gets besides fluxstream's: the client's,
        with ``request``'s own over them (lowercased)."""
        own = {name.lower(): value for name, value in request.headers.items()}
        return {**self.client._headers, **own}

    def identity(self, request: RequestSpec) -> str:
        client = self.client
        url, key = client._url, client._api_key
        secrets = fingerprint(
            url.prefix, url.query, url.auth.reveal() if url.auth is not None else None,
            key.reveal() if key is not None else None,
            credential_headers(self._given_headers(request).items()),
        )
        return f"{place_label(client.base_url, request.api.name)}#{secrets}"

    def target(self, upstream: Upstream, request: RequestSpec, shared: Sequence[str]) -> Target:
        client = self.client
        sub = _StreamFactory(client._client_for(upstream))
        api = apis.get(upstream.api)
        own = upstream.header_map
        carried: dict[str, str] = {}
        if shared:  # the marked headers, the request's value over the client's
            given = self._given_headers(request)
            carried = {name: given[name] for name in shared if name in given and name not in own}
        timeouts = request.timeouts

        def build(body: dict[str, Any]) -> RequestSpec:
            spec = sub.request(api, body, carried, timeouts)
            spec.sending = request.sending  # trace context, added at each send
            return spec

        return Target(upstream.label, api, upstream.model, upstream.max_tokens, build)

    def open(
        self, request: RequestSpec, parser: StreamParser, *, retry: RetryPolicy,
        resume: ResumePolicy, resuming: bool, route: Route | None = None,
        raise_for_outcome: bool = False,
    ) -> ReplyStream:
        """The one place a request becomes a stream."""
        client = self.client
        if logger.isEnabledFor(logging.DEBUG):  # key and model may come from a token: escaped
            logger.debug("%s stream model=%s key=%s", request.path,
                         show_key(request.body.get("model")), show_key(parser.content_key),
                         extra={"content_key": parser.content_key, "request_id": None})
        stream = ReplyStream(
            request,
            parser,
            retry=retry,
            resume=resume,
            resuming=resuming,
            observers=client.observers,
            route=route,
            token_signer=client._token_signer,
            raise_for_outcome=raise_for_outcome,
        )
        if client._closed:  # refused when it opens, before anything is sent
            stream._client_closed()
        else:
            client._streams.add(stream)
        return stream


class _TypedEndpoint:
    """What the typed signatures of the APIs share: the client's generic endpoint of their
    API (:attr:`_api`), and ``resume``, which has nothing of an API's own to add."""

    #: The registered API whose endpoint this is.
    _api: ClassVar[Api]

    def __init__(self, client: AsyncClient) -> None:
        self._endpoint = client._endpoints[self._api.name]

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
    ) -> ReplyStream:
        """Continue a logical stream of this API from :meth:`ReplyStream.resume_token` (as
        ``client.chat.resume`` does, which hands such tokens here): same content key, offsets
        that go on, the partial reply already in ``stream.reply``. ``response_format``: the
        type the original stream was asked for (a token carries its schema, not the type),
        so that ``objects()`` and ``parsed`` continue from the partial object.
        ``observers``: :class:`~fluxstream.observe.StreamObserver` s told of this stream only
        (after the client's own). ``fallbacks`` and ``failover``: as for ``stream`` (the
        upstream the token names as serving must be among them; the resume goes on there,
        then moves along the ones after it); ``raise_for_outcome`` too. A client with a
        ``token_secret`` resumes only a token signed with one of its secrets."""
        return self._endpoint.resume(
            token, extra_headers=extra_headers, resume=resume, retry=retry,
            response_format=response_format, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
        )


class Chat(_TypedEndpoint):
    """``client.chat``: Chat Completions streaming."""

    _api = CHAT_COMPLETIONS

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self._endpoints = client._endpoints

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
        **params: Any,
    ) -> ReplyStream:
        """Open a streaming chat request (lazily: on ``async with`` or the first ``anext``).

        ``stream: true`` is always set, and ``stream_options.include_usage`` unless
        ``include_usage=False``. Other keyword arguments go into the request body as they are.
        ``content_key`` names the logical request for resumable rendering (generated if None);
        ``retry`` and ``resume`` override the client's policies for this request, and the
        fields given in ``timeouts`` (:class:`~fluxstream.timeouts.Timeouts`) the client's.
        ``response_format``: a pydantic model (or any type pydantic adapts) is sent as its
        strict JSON schema and read back by ``stream.objects()`` / ``stream.parsed``; a
        ``dict`` is sent untouched. ``log``: a :class:`fluxstream.relay.ReplyLog` that records
        the stream as it is delivered (``log.record(stream)``, same API).
        ``observers``: :class:`~fluxstream.observe.StreamObserver` s told of this stream only
        (after the client's own). ``fallbacks``: :class:`~fluxstream.upstream.Upstream` s
        for this request instead of the client's; ``failover``: its
        :class:`~fluxstream.upstream.Failover`; ``raise_for_outcome``: whether the end of
        iteration raises unless the stream ended well (see :class:`AsyncClient`; ``None``:
        the client's).
        """
        body: dict[str, Any] = {"model": model, "messages": list(messages), **params}
        if include_usage:
            with_usage(body)
        return self._endpoint.stream(
            body, tools=tools, response_format=response_format, log=log,
            content_key=content_key, extra_headers=extra_headers, strict=strict, retry=retry,
            resume=resume, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
        )

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
    ) -> ReplyStream:
        """Continue a logical stream from :meth:`ReplyStream.resume_token` (e.g. after a worker
        restart): the same content key, offsets that go on where they stopped, and the partial
        reply already in ``stream.reply``; only events after the token's are delivered. A
        token of a Responses or Messages stream is handed to ``client.responses`` /
        ``client.messages``; one naming any other path is a ``ResumeTokenError`` (the request
        path is always the client's own).
        ``response_format``: the type the original stream was asked for (the token carries
        its schema, not the type), so that ``objects()`` and ``parsed`` go on from the
        partial object. ``observers``: :class:`~fluxstream.observe.StreamObserver` s told of
        this stream only (after the client's own). ``fallbacks`` and ``failover``: as for
        ``stream`` (the upstream the token names as serving must be among them; the resume
        goes on there, then moves along the ones after it); ``raise_for_outcome`` too. A
        client with a ``token_secret`` resumes only a token signed with one of its secrets,
        and refuses any other before anything is sent (``ResumeTokenError``)."""
        # The token only chooses among the registered APIs (their own paths, never its text).
        endpoint = self._endpoints[apis.for_token(token).name]
        return endpoint.resume(
            token, extra_headers=extra_headers, resume=resume, retry=retry,
            response_format=response_format, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
        )

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
        (after the client's own). ``fallbacks``: :class:`~fluxstream.upstream.Upstream` s
        for this request instead of the client's; ``failover``: its
        :class:`~fluxstream.upstream.Failover`; ``raise_for_outcome``: whether the end of
        iteration raises unless the stream ended well (see :class:`AsyncClient`; ``None``:
        the client's).
        """
        body: dict[str, Any] = {"model": model, "input": input, **params}
        if isinstance(input, Sequence) and not isinstance(input, str):
            body["input"] = list(input)
        if instructions is not None:
            body["instructions"] = instructions
        return self._endpoint.stream(
            body, tools=tools, response_format=response_format, log=log,
            content_key=content_key, extra_headers=extra_headers, strict=strict, retry=retry,
            resume=resume, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
        )

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
        (after the client's own). ``fallbacks``: :class:`~fluxstream.upstream.Upstream` s
        for this request instead of the client's; ``failover``: its
        :class:`~fluxstream.upstream.Failover`; ``raise_for_outcome``: whether the end of
        iteration raises unless the stream ended well (see :class:`AsyncClient`; ``None``:
        the client's).
        """
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                                "messages": list(messages), **params}
        if system is not None:
            body["system"] = system if isinstance(system, str) else list(system)
        return self._endpoint.stream(
            body, tools=tools, response_format=response_format, log=log,
            content_key=content_key, extra_headers=extra_headers, strict=strict, retry=retry,
            resume=resume, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
        )

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
        return self._endpoint.stream(
            body, tools=tools, response_format=response_format, log=log,
            content_key=content_key, extra_headers=extra_headers, strict=strict, retry=retry,
            resume=resume, timeouts=timeouts, observers=observers,
            fallbacks=fallbacks, failover=failover, raise_for_outcome=raise_for_outcome,
        )

    complete = completing(stream)


def keyless(base_url: str, headers: Mapping[str, Any] | None, variable: str) -> str:
    """``""`` (no key) for a client of ``base_url`` that needs none: a loopback host, or
    credentials carried in the URL (``user:pw@``) or in ``headers``. Otherwise
    :class:`~fluxstream.errors.MissingAPIKeyError` naming ``variable``: sent without a key,
    every request would be refused, or worse, retried. For clients set up the way another
    API's SDK is (``anthropic_client()``, the CLI), whose key is not ``OPENAI_API_KEY``."""
    url = _BaseURL(base_url, "base_url", None)
    names = checked_headers(headers, "headers")
    if _needs_key(url, {name.lower(): value for name, value in names.items()}):
        raise MissingAPIKeyError(variable, _safe_url(url.shown))
    return ""


#: The shortest ``token_secret`` accepted: a shorter one could be found by trying secrets,
#: offline, against any one signed token.
MIN_TOKEN_SECRET_CHARS = 16


def _token_signer(secret: str | Sequence[str] | None) -> TokenSigner | None:
    """The signer of ``token_secret`` (``None``: tokens are neither signed nor checked), its
    secrets kept as :class:`Secret` s; a wrong one is refused without being shown."""
    if secret is None:
        return None
    secrets = [secret] if isinstance(secret, str) else secret
    if not isinstance(secrets, (list, tuple)):
        raise TypeError(
            f"token_secret is a str or a list of str, not {type(secret).__name__} (random "
            "bytes: pass their .hex())"
        )
    kept: list[Secret] = []
    for value in secrets:
        if not isinstance(value, str):
            raise TypeError(
                f"token_secret holds str values, not {type(value).__name__} (random bytes: "
                "pass their .hex())"
            )
        if len(value) < MIN_TOKEN_SECRET_CHARS:
            raise ValueError(
                f"a token_secret has at least {MIN_TOKEN_SECRET_CHARS} characters (such as "
                "secrets.token_hex(32)); the one given is shorter, and not shown"
            )
        kept.append(Secret(value))
    if not kept:
        raise ValueError("token_secret is an empty list: give at least one secret")
    return TokenSigner(kept)


def _needs_key(url: _BaseURL, headers: Mapping[str, str]) -> bool:
    """A client of ``url`` with ``headers`` (lowercased) and no key would send requests that
    carry no credentials to a server that is not on this machine."""
    carried = url.auth is not None or any(CREDENTIAL_NAME.search(name) for name in headers)
    return not carried and not _loopback(url.server[0])


def _loopback(host: str) -> bool:
    """``host`` is this machine: ``localhost``, or an address in 127.0.0.0/8 or ``::1``
    (an IPv4-mapped one too)."""
    host = host.lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _carries_key(headers: Mapping[str, str]) -> bool:
    """The (lowercased) headers already authenticate: a caller's own ``Authorization`` (a
    proxy's token), or Anthropic's ``x-api-key``."""
    return "authorization" in headers or "x-api-key" in headers


#: The HTTP timeouts of the client fluxstream creates (a request under them passes none).
_CREATED_WITH = (
    DEFAULT_TIMEOUT.connect, DEFAULT_TIMEOUT.read, DEFAULT_TIMEOUT.write, DEFAULT_TIMEOUT.pool
)
#: The keywords that are shorthands for one field of ``timeouts=``, with their defaults.
_TIMEOUT_KEYWORDS: dict[str, tuple[str, float | None]] = {
    "idle_timeout": ("idle", None),
    "stall_timeout": ("stall", None),
    "first_token_timeout": ("first_token", None),
    "finish_grace": ("finish_grace", DEFAULT_TIMEOUTS.finish_grace),
}


def _configured_timeouts(
    timeouts: Timeouts | None, timeout: Any, http_client: Any, **keywords: float | None
) -> Timeouts:
    """The client's :class:`Timeouts`, every field given: ``timeouts``, the shorthand
    keywords (``timeout=`` for the four HTTP fields), and for the HTTP fields given by
    neither the injected ``http_client``'s own timeouts ("used as it is"), else ours."""
    if timeouts is not None and not isinstance(timeouts, Timeouts):
        raise TypeError(f"timeouts must be a Timeouts, not {type(timeouts).__name__}")
    requested = timeouts if timeouts is not None else Timeouts()
    shorthand: dict[str, tuple[str, float | None]] = {}  # field: (keyword, value)
    said: dict[str, Any] = {} if isinstance(timeout, _NotGiven) else {"timeout": timeout}
    # Left at its default, a keyword says nothing.
    said.update((k, v) for k, v in keywords.items() if v != _TIMEOUT_KEYWORDS[k][1])
    for keyword, value in said.items():
        fields = _shorthand_fields(keyword, value)
        shorthand.update((name, (keyword, seconds)) for name, seconds in fields.items())
    for name, (keyword, _) in shorthand.items():
        if name in requested.given:
            raise TypeError(
                f"{keyword}= and timeouts={requested!r} both set the {name} deadline: "
                "pass one of them"
            )
    requested = requested.replace(**{name: value for name, (_, value) in shorthand.items()})
    own = getattr(http_client, "timeout", None) if http_client is not None else None
    http = _as_timeout(DEFAULT_TIMEOUT if own is None else own)
    base = Timeouts(**{name: getattr(http, name) for name in HTTP_FIELDS})
    return base.complete().merge(requested)


def _shorthand_fields(keyword: str, value: Any) -> dict[str, float | None]:
    """The :class:`Timeouts` fields a timeout keyword of the client stands for (given to the
    constructor or assigned): ``timeout`` the four HTTP ones, the others one each."""
    if keyword == "timeout":
        http = _as_timeout(value)
        return {name: getattr(http, name) for name in HTTP_FIELDS}
    return {_TIMEOUT_KEYWORDS[keyword][0]: value}


def _as_timeout(value: Any) -> httpx.Timeout:
    if isinstance(value, httpx.Timeout):
        return value
    if value is None or isinstance(value, (int, float)):
        return httpx.Timeout(value)
    # Another library's Timeout (httpx2): same four attributes.
    return httpx.Timeout(
        connect=getattr(value, "connect", None),
        read=getattr(value, "read", None),
        write=getattr(value, "write", None),
        pool=getattr(value, "pool", None),
    )


def _safe_url(url: str) -> str:
    """The URL without credentials or query (either may hold a key)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None, query=None))


class _BaseURL:
    """``base_url`` taken apart once: what each request's URL is made of.

    A request's path goes after the base URL's path and before its query (Azure's
    ``?api-version=...``), and ``default_query`` joins that query. Credentials are taken out
    and kept as the Basic ``Authorization`` value, so no URL handed to the HTTP library holds
    them (httpx logs every request's URL at INFO).
    """

    __slots__ = ("_roots", "auth", "prefix", "query", "server", "shown")

    def __init__(
        self, raw: str, source: str, default_query: Mapping[str, str | int | float | bool] | None
    ) -> None:
        url = _parsed_base_url(raw, source)
        username, password = url.username, url.password
        self.auth: Secret | None = None
        if username or password:  # as httpx.BasicAuth builds it from a URL's credentials
            pair = f"{username}:{password}".encode()
            self.auth = Secret(f"Basic {base64.b64encode(pair).decode('ascii')}")
        bare = url.copy_with(username=None, password=None, query=None, fragment=None)
        #: Host and port, as traces name the server (``server.address``/``server.port``).
        self.server: tuple[str, int | None] = (
            url.host, url.port or {"http": 80, "https": 443}.get(url.scheme)
        )
        self.prefix = str(bare).rstrip("/")
        query = url.query.decode("ascii")
        if default_query:
            query = str(httpx.QueryParams(query).merge(default_query))
        self.query = query
        own = url.query.decode("ascii")
        self.shown = f"{self.prefix}?{own}" if own else self.prefix
        self._roots: dict[Api, _BaseURL] = {}

    def for_api(self, api: Api) -> _BaseURL:
        """This base URL as ``api``'s root, as that API's own SDK takes a base URL
        (:meth:`~fluxstream.apis.Api.root_url`: Anthropic's gets ``/v1`` when missing,
        Gemini's a version when it names none); made once per API."""
        rooted = self._roots.get(api)
        if rooted is None:
            prefix = api.root_url(self.prefix)
            rooted = self
            if prefix != self.prefix:
                rooted = copy.copy(self)
                rooted.prefix, rooted._roots = prefix, {}
            self._roots[api] = rooted
        return rooted

    def join(self, path: str) -> str:
        """The URL of ``path`` (which may carry a query of its own, after the base's)."""
        query = self.query
        if not query:
            return f"{self.prefix}/{path}"
        path, _, own = path.partition("?")
        return f"{self.prefix}/{path}?{query}&{own}" if own else f"{self.prefix}/{path}?{query}"


def _parsed_base_url(raw: str, source: str) -> httpx.URL:
    """``raw`` parsed, or a ``ValueError`` that says what is wrong in the user's terms (the
    HTTP library would say ``UnsupportedProtocol '127.0.0.1://'`` on every request)."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError):
        raise ValueError(f"{source} is not a URL: got {_shown_url(raw)}") from None
    if url.scheme not in ("http", "https"):
        raise ValueError(f"{source} needs http:// or https://: got {_shown_url(raw)}")
    if not url.host:
        raise ValueError(f"{source} needs a host: got {_shown_url(raw)}")
    if url.port is not None and not 0 < url.port < 65536:  # httpx.URL takes any number
        raise ValueError(f"{source} needs a port from 1 to 65535: got {_shown_url(raw)}")
    return url


def _shown_url(raw: object) -> str:
    """A URL that failed to parse, for an error message: without a query or a fragment, and
    without anything before an ``@`` (credentials) but a scheme; cut, on one line."""
    if not isinstance(raw, str):
        return show_key(raw)
    shown = raw.split("#", 1)[0].split("?", 1)[0]
    at = shown.rfind("@")
    if at >= 0:
        scheme, sep, _ = shown[:at].partition("://")
        keep = scheme + sep if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) else ""
        shown = f"{keep}***{shown[at:]}"
    return repr(shown[:120]) + ("..." if len(shown) > 120 else "")
