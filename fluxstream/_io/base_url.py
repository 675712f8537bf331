"""A base URL taken apart once, and whether a client of it may go without a key.

What each request's URL is made of (prefix, query, each API's root), the Basic credentials a
URL carries (taken out of every URL handed to the HTTP library, whose log would show them),
how a URL is shown in an error (never its credentials or query), and the key rule: a client
with no key is refused unless its server is this machine or credentials come another way.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

import httpx

from .._core.headers import CREDENTIAL_NAME, checked_headers
from .._core.secret import Secret
from ..apis import Api
from ..errors import MissingAPIKeyError, show_key

__all__ = ["BaseURL", "keyless", "loopback", "needs_key", "safe_url"]


class BaseURL:
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
        self._roots: dict[Api, BaseURL] = {}

    def for_api(self, api: Api) -> BaseURL:
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


def keyless(base_url: str, headers: Mapping[str, Any] | None, variable: str) -> str:
    """``""`` (no key) for a client of ``base_url`` that needs none: a loopback host, or
    credentials carried in the URL (``user:pw@``) or in ``headers``. Otherwise
    :class:`~fluxstream.errors.MissingAPIKeyError` naming ``variable``: sent without a key,
    every request would be refused, or worse, retried. For clients set up the way another
    API's SDK is (``anthropic_client()``, the CLI), whose key is not ``OPENAI_API_KEY``."""
    url = BaseURL(base_url, "base_url", None)
    names = checked_headers(headers, "headers")
    if needs_key(url, {name.lower(): value for name, value in names.items()}):
        raise MissingAPIKeyError(variable, safe_url(url.shown))
    return ""


def needs_key(url: BaseURL, headers: Mapping[str, str]) -> bool:
    """A client of ``url`` with ``headers`` (lowercased) and no key would send requests that
    carry no credentials to a server that is not on this machine."""
    carried = url.auth is not None or any(CREDENTIAL_NAME.search(name) for name in headers)
    return not carried and not loopback(url.server[0])


def loopback(host: str) -> bool:
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


def safe_url(url: str) -> str:
    """The URL without credentials or query (either may hold a key)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None, query=None))


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
