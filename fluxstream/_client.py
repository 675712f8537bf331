"""``AsyncClient``: the object services hold. Its configuration and its lifecycle.

It follows the ecosystem's conventions: ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` when not given,
an injected ``httpx.AsyncClient`` (or ``httpx2.AsyncClient``, or ``httpx_aiohttp``'s client)
used as it is and never closed by us, ``httpx.Timeout`` for connect/read/write/pool, stdlib
``logging`` under the ``fluxstream`` logger.

The API key is kept in a :class:`Secret`, whose ``repr`` and ``str`` are masked; it is only
turned into a header when a request is built, and error messages are built from responses,
never from requests.

What the client holds is its configuration as one frozen value,
:class:`~fluxstream._io.client_settings.ClientSettings`, made again whenever a setting is
assigned and handed to its generic endpoints (:mod:`fluxstream._io.endpoint`), which make every
stream from it; the typed signatures (``client.chat``...) are :mod:`fluxstream._typed_endpoints`,
how requests are built :mod:`fluxstream._io.request_builder` and
:mod:`fluxstream._io.base_url`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from . import apis
from ._core.headers import checked_headers as checked_headers
from ._core.headers import header_safe
from ._core.secret import Secret as Secret
from ._core.secret import token_signer
from ._core.think_tags import ThinkTags, think_tags_of
from ._io.base_url import BaseURL, needs_key, safe_url
from ._io.base_url import keyless as keyless
from ._io.client_settings import ClientSettings, ClientState, checked_upstreams
from ._io.client_timeouts import (
    DEFAULT_TIMEOUT,
    NOT_GIVEN,
    TimeoutShorthands,
    configured_timeouts,
)
from ._io.default_client import make_http_client
from ._io.endpoint import Endpoint
from ._io.http_library import HttpErrors
from ._io.request_builder import RequestBuilder
from ._io.request_builder import encode_body as encode_body
from ._limits import StreamLimits
from ._observe import StreamObserver
from ._retry import ResumePolicy, RetryPolicy
from ._timeouts import Timeouts
from ._typed_endpoints import Chat, Gemini, Messages, Responses
from ._upstream import Failover, Upstream
from ._usage import ModelPrice, UsageLedger
from .apis import Api
from .apis.chat_completions import CHAT_COMPLETIONS
from .errors import MissingAPIKeyError
from .sse import DEFAULT_MAX_EVENT_BYTES

__all__ = ["DEFAULT_TIMEOUT", "AsyncClient", "Chat", "Secret"]

#: One client must serve hundreds of concurrent streams; httpx's default pool allows 100.
DEFAULT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)


class AsyncClient(TimeoutShorthands):
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
    :param timeouts: every deadline of this client's streams, as one
        :class:`~fluxstream._timeouts.Timeouts`: ``connect``, ``read``, ``write`` and ``pool``
        (the HTTP library's; not given: the injected ``http_client``'s own, or
        :data:`DEFAULT_TIMEOUT` for a client we create), ``idle`` (no byte at all:
        :class:`~fluxstream.errors.IdleTimeoutError`), ``stall`` (no content between two
        pieces of content: :class:`~fluxstream.errors.StallTimeoutError`; it does not count
        before the first content: reading a long prompt is not a stall), ``first_token`` (no
        content since the request: :class:`~fluxstream.errors.FirstTokenTimeoutError`; it
        also bounds the wait for the response head) and ``finish_grace`` (once every choice
        has a finish reason, how long to wait for the usage chunk and the sentinel before
        ending the stream ``finished``: some servers never send ``[DONE]`` and keep the
        connection open; 2 s, ``None`` waits for the server). Each request may override
        fields with its own ``timeouts=``; ``client.timeouts`` is assignable.
    :param timeout: deprecated (a ``DeprecationWarning``): ``timeouts=Timeouts(connect=...,
        read=..., write=..., pool=...)``; an ``httpx.Timeout`` or seconds.
    :param idle_timeout: deprecated: ``timeouts=Timeouts(idle=...)``.
    :param stall_timeout: deprecated: ``timeouts=Timeouts(stall=...)``.
    :param first_token_timeout: deprecated: ``timeouts=Timeouts(first_token=...)``.
    :param finish_grace: deprecated: ``timeouts=Timeouts(finish_grace=...)``. Each of these
        five still sets its fields; one set together with a ``timeouts`` that gives the same
        field is a ``TypeError`` (which one is meant is not guessed).
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
        (:class:`~fluxstream._limits.StreamLimits`: choices, tool calls, reply size, bytes
        without an event).
    :param retry: retries before any content (:class:`~fluxstream._retry.RetryPolicy`; pass
        ``RetryPolicy.off()`` to disable).
    :param resume: what to do when a stream drops after content arrived
        (:class:`~fluxstream._retry.ResumePolicy`; ``Last-Event-ID`` by default).
    :param observers: :class:`~fluxstream._observe.StreamObserver` s told when each stream
        of this client opens, of every event it delivers, and once when it ends (tracing,
        metrics); a call's own ``observers=`` come after these.
    :param prices: :class:`~fluxstream._usage.ModelPrice` per model name (per million
        tokens; no table is shipped): each reply of a priced model gets ``reply.cost``
        (a ``Decimal``), from its usage or, when the server reported none, its
        ``usage_estimate`` (:mod:`fluxstream._usage`).
    :param fallbacks: :class:`~fluxstream._upstream.Upstream` s asked in order when this
        client's own ``base_url`` fails, before the reply started (a retryable failure, once
        ``failover.per_upstream_attempts`` are spent) or after (once its own resume
        strategies are spent: the reply is continued there). A request may give its own. Each
        is sent its own key and headers only; two with one label (one URL and API, or this
        client's own base URL) are a ``ValueError`` asking for a ``name=``.
    :param failover: when to move on, and the circuit breaker
        (:class:`~fluxstream._upstream.Failover`; its cool-downs are this client's).
    :param raise_for_outcome: ``True``: a stream that did not end well (``truncated``,
        ``failed``, ``cancelled``) raises at the end of its ``async for`` (and ``text()``,
        ``objects()``) what :meth:`~fluxstream._reply.Reply.raise_for_outcome` raises, after
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
    :param think_tags: reasoning a server sends inside the text between tags
        (``<think>…</think>``, as llama.cpp without a reasoning parser and several open
        models do) is given as reasoning deltas, the rest as text: ``True`` for the default
        tags (``think``, ``thinking``, ``reasoning``, at the start of a turn), a
        :class:`~fluxstream._core.think_tags.ThinkTags` for others. A call may say otherwise.

    Its settings (``base_url``, ``timeouts``, ``retry``, ``resume``, ``observers``,
    ``fallbacks``, ``failover``, ``raise_for_outcome``, ``max_event_bytes``,
    ``require_finish_reason``, ``stream_limits``, ``think_tags``) are assignable, checked as
    the constructor checks them: the streams made after an assignment use the new value, one
    made before keeps what it was made with.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        http_client: Any = None,
        transport: str = "auto",
        limits: httpx.Limits | None = None,
        timeout: httpx.Timeout | float | None = NOT_GIVEN,
        idle_timeout: float | None = NOT_GIVEN,
        stall_timeout: float | None = NOT_GIVEN,
        first_token_timeout: float | None = NOT_GIVEN,
        finish_grace: float | None = NOT_GIVEN,
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
        think_tags: ThinkTags | bool = False,
    ) -> None:
        source = "base_url" if base_url else "base_url (from OPENAI_BASE_URL)"
        base = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self._default_query = default_query
        url = BaseURL(base, source, default_query)
        variable = CHAT_COMPLETIONS.api_key_variable
        key = api_key if api_key is not None else os.environ.get(variable)
        self._api_key = Secret(header_safe(key, "api_key", "the key")) if key else None
        #: The variable a key would come from, while this client has none and was not told
        #: to go without (``api_key=""``): a base URL that needs a key is refused.
        self._unkeyed = variable if not key and api_key is None else None
        given = {"timeout": timeout, "idle_timeout": idle_timeout, "stall_timeout": stall_timeout,
                 "first_token_timeout": first_token_timeout, "finish_grace": finish_grace}
        deadlines = configured_timeouts(
            timeouts, http_client, {k: v for k, v in given.items() if v is not NOT_GIVEN}
        )
        ledger = UsageLedger(prices)
        fallbacks = checked_upstreams(fallbacks, url.shown)
        _check_failover(failover)
        _check_raise_for_outcome(raise_for_outcome)
        signer = token_signer(token_secret)
        self._headers = {
            name.lower(): value for name, value in checked_headers(headers, "headers").items()
        }
        self._check_key(url)
        self._owns_http = http_client is None
        if http_client is None:
            http_client = make_http_client(
                transport, DEFAULT_TIMEOUT, limits if limits is not None else DEFAULT_LIMITS
            )
        self._http = http_client
        self._errors = HttpErrors.for_client(http_client)
        #: What this client's streams share whatever its settings (see ``aclose``).
        self._state = ClientState(http_client, self._errors, owns_http=self._owns_http)
        #: The settings in force: what the next stream is made with.
        self._settings = ClientSettings(
            retry=retry if retry is not None else RetryPolicy(),
            resume=resume if resume is not None else ResumePolicy(),
            raise_for_outcome=raise_for_outcome,
            observers=tuple(observers),
            fallbacks=fallbacks,
            failover=failover if failover is not None else Failover(),
            timeouts=deadlines,
            max_event_bytes=max_event_bytes,
            require_finish_reason=require_finish_reason,
            stream_limits=stream_limits,
            think_tags=think_tags_of(think_tags),
            usage_ledger=ledger,
            token_signer=signer,
            requests=self._requests_to(url),
            state=self._state,
        )
        #: One generic endpoint per registered API; the typed signatures use theirs.
        self._endpoints = {api.name: Endpoint(api, self._settings) for api in apis.registered()}
        self._chat = Chat(self._endpoints)
        self._responses = Responses(self._endpoints)
        self._messages = Messages(self._endpoints)
        self._gemini = Gemini(self._endpoints)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"<fluxstream.AsyncClient base_url={safe_url(self.base_url)!r} api_key={key}>"

    def _requests_to(self, url: BaseURL) -> RequestBuilder:
        """How this client's requests to ``url`` are built (its key and headers)."""
        return RequestBuilder(url, self._api_key, self._headers, self._http, self._errors,
                              owns_http=self._owns_http)

    def _update(self, **changes: Any) -> None:
        """Make the next streams with ``changes`` to the settings (checked by the caller)."""
        settings = self._settings = self._settings.replace(**changes)
        for endpoint in self._endpoints.values():
            endpoint.settings = settings

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
        ``complete`` and ``resume`` (:class:`~fluxstream._endpoints.Responses`)."""
        return self._responses

    @property
    def messages(self) -> Messages:
        """Anthropic Messages streaming (``POST {base_url}/v1/messages``, ``/v1`` once):
        ``stream``, ``complete`` and ``resume`` (:class:`~fluxstream._endpoints.Messages`)."""
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
        return self._settings.requests.url.shown

    @base_url.setter
    def base_url(self, value: str) -> None:
        url = BaseURL(value, "base_url", self._default_query)
        self._check_key(url)
        self._update(requests=self._requests_to(url))

    def _check_key(self, url: BaseURL) -> None:
        """Refuse a client with no key, none on purpose, for a server that needs one (see
        :func:`keyless`): every request would go out unauthenticated."""
        variable = self._unkeyed
        if variable is not None and needs_key(url, self._headers):
            raise MissingAPIKeyError(variable, safe_url(url.shown))

    @property
    def timeouts(self) -> Timeouts:
        """Every deadline of this client's streams, each field given
        (:class:`~fluxstream._timeouts.Timeouts`); a request's ``timeouts=`` goes over it.
        Assigning one is taken as the constructor's ``timeouts=``: its fields over the
        defaults (the injected ``http_client``'s own for the HTTP ones); to change one
        field, ``client.timeouts = client.timeouts.replace(stall=10)``."""
        return self._settings.timeouts

    @timeouts.setter
    def timeouts(self, value: Timeouts) -> None:
        if not isinstance(value, Timeouts):
            raise TypeError(f"timeouts must be a Timeouts, not {type(value).__name__}")
        self._update(timeouts=configured_timeouts(value, None if self._owns_http else self._http))

    # The deprecated shorthand properties (``timeout``, ``idle_timeout``...) come from
    # ``TimeoutShorthands``; they read and replace the settings' timeouts through these two.

    def _current_timeouts(self) -> Timeouts:
        return self._settings.timeouts

    def _replace_timeouts(self, value: Timeouts) -> None:
        self._update(timeouts=value)

    @property
    def read_timeout(self) -> float | None:
        """Seconds allowed between two reads (``timeouts.idle``, else the read timeout)."""
        return self._settings.timeouts.read_gap

    # ------------------------------------------------------------------ policies

    @property
    def retry(self) -> RetryPolicy:
        """Retries before any content (:class:`~fluxstream._retry.RetryPolicy`); a request's
        ``retry=`` replaces it."""
        return self._settings.retry

    @retry.setter
    def retry(self, value: RetryPolicy) -> None:
        self._update(retry=value)

    @property
    def resume(self) -> ResumePolicy:
        """What a stream does when it drops after content arrived
        (:class:`~fluxstream._retry.ResumePolicy`); a request's ``resume=`` replaces it."""
        return self._settings.resume

    @resume.setter
    def resume(self, value: ResumePolicy) -> None:
        self._update(resume=value)

    @property
    def raise_for_outcome(self) -> bool:
        """Whether this client's streams raise at the end of iteration unless they ended
        well (see the ``raise_for_outcome`` parameter)."""
        return self._settings.raise_for_outcome

    @raise_for_outcome.setter
    def raise_for_outcome(self, value: bool) -> None:
        _check_raise_for_outcome(value)
        self._update(raise_for_outcome=value)

    @property
    def observers(self) -> tuple[StreamObserver, ...]:
        """Told of every stream of this client (:mod:`fluxstream._observe`), first."""
        return self._settings.observers

    @observers.setter
    def observers(self, value: Sequence[StreamObserver]) -> None:
        self._update(observers=tuple(value))

    @property
    def fallbacks(self) -> tuple[Upstream, ...]:
        """Where a stream goes when this client's own base URL fails (see ``fallbacks``)."""
        return self._settings.fallbacks

    @fallbacks.setter
    def fallbacks(self, value: Sequence[Upstream]) -> None:
        self._update(fallbacks=checked_upstreams(value, self.base_url))

    @property
    def failover(self) -> Failover:
        """When a stream moves on to a fallback (:class:`~fluxstream._upstream.Failover`)."""
        return self._settings.failover

    @failover.setter
    def failover(self, value: Failover) -> None:
        _check_failover(value)
        self._update(failover=value)

    @property
    def max_event_bytes(self) -> int:
        """The largest SSE event a stream accepts."""
        return self._settings.max_event_bytes

    @max_event_bytes.setter
    def max_event_bytes(self, value: int) -> None:
        self._update(max_event_bytes=value)

    @property
    def require_finish_reason(self) -> bool:
        """Whether ``[DONE]`` with no finish reason ends a stream ``truncated``."""
        return self._settings.require_finish_reason

    @require_finish_reason.setter
    def require_finish_reason(self, value: bool) -> None:
        self._update(require_finish_reason=value)

    @property
    def stream_limits(self) -> StreamLimits | None:
        """Caps on server-controlled input (:class:`~fluxstream._limits.StreamLimits`)."""
        return self._settings.stream_limits

    @stream_limits.setter
    def stream_limits(self, value: StreamLimits | None) -> None:
        self._update(stream_limits=value)

    @property
    def think_tags(self) -> ThinkTags | None:
        """Which tags in the text carry reasoning (``None``: none are read)."""
        return self._settings.think_tags

    @think_tags.setter
    def think_tags(self, value: ThinkTags | bool) -> None:
        self._update(think_tags=think_tags_of(value))

    @property
    def usage_ledger(self) -> UsageLedger:
        """Settles every reply's usage estimate and cost when its stream ends."""
        return self._settings.usage_ledger

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
        self._state.close()
        if self._owns_http:
            await self._http.aclose()


def _check_failover(failover: object) -> None:
    if failover is not None and not isinstance(failover, Failover):
        raise TypeError(f"failover is a Failover, not {type(failover).__name__}")


def _check_raise_for_outcome(value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"raise_for_outcome is True or False, not {type(value).__name__}")


def request_for(
    client: AsyncClient, api: Api, body: Mapping[str, Any], headers: Mapping[str, str]
) -> Any:
    """The HTTP library's request of ``body`` to ``api``'s path, built and authenticated as a
    stream's (for a caller that sends it itself: ``fluxstream capture`` records the raw
    response)."""
    settings = client._settings
    return settings.requests.build(
        api.path, body, checked_headers(headers, "headers"), settings.timeouts, api=api
    )
