"""How a client's requests to one base URL are built: URL, headers, credentials, body.

One :class:`RequestBuilder` per base URL and key: the client's own (remade when its
``base_url`` is assigned) and one per fallback :class:`~fluxstream._upstream.Upstream` (its
own key and headers, never the client's), all on the client's HTTP client. What does not
depend on the request is made once (merged headers per API, the HTTP library's timeout
keywords, each API's builders), since every request pays its set-up before its first byte.

The key is kept masked and revealed only into the headers of a request being built: never
into a URL, a repr, a log line, an error or a resume token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from .._core.secret import Secret
from .._timeouts import Timeouts
from .._upstream import credential_headers, fingerprint, place_label
from ..apis import Api, bearer
from .base_url import BaseURL
from .client_timeouts import CREATED_WITH
from .http_library import HttpErrors

__all__ = ["ApiRequests", "RequestBuilder", "carries_key", "encode_body"]

_USER_AGENT = "fluxstream/0.1"
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


def carries_key(headers: Mapping[str, str]) -> bool:
    """The (lowercased) headers already authenticate: a caller's own ``Authorization`` (a
    proxy's token), or Anthropic's ``x-api-key``."""
    return "authorization" in headers or "x-api-key" in headers


class RequestBuilder:
    """The requests to one base URL, with one key and the headers given with it.

    ``headers`` are checked and lowercased by the caller; ``owns_http``: the HTTP client is
    fluxstream's own (a request under its timeouts passes none).
    """

    __slots__ = (
        "_api_headers",
        "_apis",
        "_get_headers",
        "_http_timeouts",
        "_identity",
        "_labels",
        "_post_headers",
        "_sends_key",
        "errors",
        "headers",
        "http",
        "key",
        "owns_http",
        "url",
    )

    def __init__(
        self, url: BaseURL, key: Secret | None, headers: dict[str, str], http: Any,
        errors: HttpErrors, *, owns_http: bool,
    ) -> None:
        self.url = url
        self.key = key
        self.headers = headers
        self.http = http
        self.errors = errors
        self.owns_http = owns_http
        # Merged once: most requests add no headers of their own (see ``build``). Without
        # the key: it is revealed only when a request is built.
        self._post_headers = self._stock(True, None)
        self._get_headers = self._stock(False, None)
        #: The same, with each API's own headers (Anthropic's version pin), made on the
        #: API's first request: ``(post, API name) -> headers``, without credentials.
        self._api_headers: dict[tuple[bool, str], dict[str, str]] = {}
        #: The HTTP library's keywords for the deadlines of the latest request built
        #: (``Timeouts`` are immutable: the same object, the same keywords).
        self._http_timeouts: tuple[Timeouts | None, dict[str, Any]] = (None, {})
        #: The key is added to requests with none of their own (see ``build``).
        self._sends_key = bool(key) and not carries_key(headers)
        self._apis: dict[Api, ApiRequests] = {}
        self._labels: dict[str, str] = {}
        #: The fingerprint of this base URL's credentials with no request headers of its own.
        self._identity: str | None = None

    def for_api(self, api: Api) -> ApiRequests:
        """How ``api``'s requests are built here (made on its first stream)."""
        built = self._apis.get(api)
        if built is None:
            built = self._apis[api] = ApiRequests(self, api)
        return built

    def label(self, api: Api) -> str:
        """This base URL as the upstream of ``api``'s streams (:func:`place_label`)."""
        label = self._labels.get(api.name)
        if label is None:
            label = self._labels[api.name] = place_label(self.url.shown, api.name)
        return label

    def identity(self, api: Api, headers: Mapping[str, str]) -> str:
        """This base URL to the circuit breaker: its label and a fingerprint of the
        credentials a request with ``headers`` of its own is sent with (see
        :attr:`~fluxstream._upstream.Upstream.identity`)."""
        secrets = self._identity
        if secrets is None or headers:
            url, key = self.url, self.key
            given = {**self.headers, **{name.lower(): value for name, value in headers.items()}}
            secrets = fingerprint(
                url.prefix, url.query, url.auth.reveal() if url.auth is not None else None,
                key.reveal() if key is not None else None, credential_headers(given.items()),
            )
            if not headers:
                self._identity = secrets
        return f"{self.label(api)}#{secrets}"

    def merged(
        self, post: bool, headers: Mapping[str, str], *, api: Api | None = None
    ) -> dict[str, str]:
        """The headers of a request, without credentials: ours, the client's, then the
        request's own (over the API's own, such as a version pin)."""
        # Header names are case-insensitive: merge them lowercased, so a caller's own
        # Authorization (a proxy's token) replaces ours instead of being sent beside it.
        return {
            **self._stock_headers(post, api),
            **{name.lower(): value for name, value in headers.items()},
        }

    def _stock(self, post: bool, api: Api | None) -> dict[str, str]:
        """The headers of a request that adds none of its own: ours, the client's, the
        API's."""
        return {
            "accept": "text/event-stream",
            **({"content-type": "application/json"} if post else {}),
            "user-agent": _USER_AGENT,
            **self.headers,
            **(api.headers if api is not None else {}),
        }

    def _stock_headers(self, post: bool, api: Api | None) -> dict[str, str]:
        """:meth:`_stock`, merged once per API (shared: never changed after)."""
        if api is None or not api.headers:
            return self._post_headers if post else self._get_headers
        merged = self._api_headers.get((post, api.name))
        if merged is None:
            merged = self._api_headers[(post, api.name)] = self._stock(post, api)
        return merged

    def _authenticate(self, headers: dict[str, str], api: Api | None, url: BaseURL) -> None:
        """Add the credentials to ``headers`` (lowercased), revealed only now: the key as the
        API sends it (a Bearer token unless ``api`` says otherwise) unless a header already
        carries a key, and ``url``'s credentials as Basic authentication in place of any
        other ``Authorization`` (httpx's rule for a URL with credentials)."""
        key = self.key
        if key and not carries_key(headers):
            name, value = (api.credential if api is not None else bearer)(key.reveal())
            headers[name] = value
        if url.auth is not None:
            headers["authorization"] = url.auth.reveal()

    def build(
        self,
        path: str,
        body: Mapping[str, Any] | None,
        headers: Mapping[str, str],
        timeouts: Timeouts,
        *,
        api: Api | None = None,
        url: BaseURL | None = None,
    ) -> Any:
        """The stream's ``POST`` of ``body`` (a ``GET`` when ``body`` is ``None``), to
        ``api`` (``None``: an API that takes the key as a Bearer token and adds no header)
        under ``url`` (this base URL as ``api``'s root when ``None``), under the HTTP
        timeouts of ``timeouts``."""
        if url is None:
            url = self.url if api is None else self.url.for_api(api)
        if headers:
            all_headers = self.merged(body is not None, headers, api=api)
            self._authenticate(all_headers, api, url)
        else:  # the usual case: only the client's own headers (and the API's), merged once
            all_headers = self._stock_headers(body is not None, api)
            if self._sends_key or url.auth is not None:
                all_headers = dict(all_headers)
                self._authenticate(all_headers, api, url)
        last = self._http_timeouts
        if last[0] is timeouts:  # the usual case: the same deadlines as the stream before
            extra = last[1]
        else:
            extra = {}
            # A plain tuple, not an httpx.Timeout: httpx2 and other forks accept it too.
            # Left out when it is what the client we created has anyway (the usual case).
            t = timeouts
            limits = (t.connect, t.read_gap, t.write, t.pool)
            if not self.owns_http or limits != CREATED_WITH:
                extra["timeout"] = limits
            self._http_timeouts = (timeouts, extra)
        if body is not None and api is not None:
            path, body = api.target(path, body)  # Gemini: the model goes in the path
        content = None if body is None else encode_body(body)
        return self.http.build_request(
            "GET" if body is None else "POST",
            url.join(path),
            content=content,
            headers=all_headers,
            **extra,
        )


class ApiRequests:
    """How one API's requests are built under one base URL (a stream's ``build`` and
    ``build_get``): made on the first stream there and shared by the next ones, since
    nothing in them is a request's own (the path, body, headers and timeouts are their
    arguments). Requests go under the base URL as the API's root
    (:meth:`BaseURL.for_api`)."""

    __slots__ = ("build", "build_get")

    def __init__(self, builder: RequestBuilder, api: Api) -> None:
        url = builder.url.for_api(api)
        make = builder.build

        def build(
            path: str, body: Mapping[str, Any], headers: Mapping[str, str], timeouts: Timeouts
        ) -> Any:
            return make(path, body, headers, timeouts, api=api, url=url)

        def build_get(path: str, headers: Mapping[str, str], timeouts: Timeouts) -> Any:
            return make(path, None, headers, timeouts, api=api, url=url)

        self.build = build
        self.build_get = build_get
