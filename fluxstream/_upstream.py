"""Upstreams: the places one reply can come from, and how a stream moves between them.

A provider fails in two ways that matter to a reader: before the reply started (nothing was
shown: any other provider may answer instead) and after it started (text was shown: only a
provider that goes on from that text keeps the answer whole). :class:`Upstream` names one
place (base URL, key, API, model and the request fields that differ there) and
:class:`Failover` says when a stream moves on. The client's own ``base_url`` is always the
first upstream; ``fallbacks`` follow in order.

Plain values (frozen, validated when made), so a mistake is a ``ValueError`` at the line that
made it, not a failed request in the middle of a reply.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from . import apis
from ._core.headers import CREDENTIAL_NAME, HEADER_NAME, bad_name, checked_headers, header_safe

__all__ = ["Failover", "Upstream", "place_label"]

#: Keys the fingerprints of this process: a fingerprint that is shown (pytest's comparison of
#: two upstreams) or kept (the circuit breaker's entries) tells nothing of the secrets it was
#: made from, not even by trying likely passwords.
_SALT = os.urandom(16)
#: An API's name as an error may repeat it: a key passed as ``api=`` by mistake has not
#: this shape (keys are long and mix digits in).
_API_NAME = re.compile(r"[a-z][a-z_]{0,31}")


def place_label(base_url: str, api: str) -> str:
    """``host:port/path/api`` (``127.0.0.1:8080/v1/chat_completions``): one style for the
    client's own base URL and every fallback, the path kept so that two APIs behind one host
    (a proxy's ``/openai/v1`` and ``/anthropic/v1``) are two upstreams, and never the URL's
    credentials or query (either may hold a key)."""
    parts = urlsplit(base_url)
    host = parts.hostname or "?"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    path = parts.path.rstrip("/")
    return f"{host}{port}{path}/{api}"


def fingerprint(*secrets: object) -> str:
    """A short name for ``secrets`` (strings, ``None``, tuples of them) that cannot be turned
    back into them: equal secrets, equal fingerprints, within this process."""
    return hashlib.blake2b(repr(secrets).encode(), key=_SALT, digest_size=12).hexdigest()


def credential_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The (lowercased) headers among ``headers`` whose names say they carry a credential,
    in a stable order: what, besides the key and the URL, tells one account from another."""
    return tuple(sorted((k.lower(), v) for k, v in headers if CREDENTIAL_NAME.search(k)))


def shown_url(url: str) -> str:
    """``url`` as a repr shows it: no ``user:password@`` (``***@`` says there was one), each
    query value ``***`` (any of them may be a key: ``?key=``, a signature), no fragment."""
    parts = urlsplit(url)
    _, at, host = parts.netloc.rpartition("@")
    netloc = f"***@{host}" if at else host
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    return shown + ("?" + "&".join(f"{name}=***" for name in names) if names else "")


@dataclass(frozen=True, eq=False)
class Upstream:
    """One place a reply can come from.

    What it is sent is its own: its key, its ``headers``, and fluxstream's (``accept``,
    ``content-type``, ``user-agent``, the API's own fixed headers such as
    ``anthropic-version``, trace context). The client's ``headers=`` and a request's
    ``extra_headers=`` belong to the client's own base URL and never reach an upstream,
    except the names :attr:`Failover.shared_headers` marks.

    :param base_url: the API root as the API's own SDK takes it: ``https://api.anthropic.com``
        (``ANTHROPIC_BASE_URL``; ``/v1`` is added when missing), Gemini's
        ``https://generativelanguage.googleapis.com`` (``/v1beta`` is added unless the URL
        ends in a version or is a Vertex path), ``http://127.0.0.1:8080/v1`` for Chat
        Completions and Responses (``OPENAI_BASE_URL``: used as given).
    :param api: the registered API it speaks (:func:`fluxstream.apis.names`); the request is
        translated into it (messages, system prompt, length cap, tools), so an Anthropic
        primary may fall back on a Chat Completions server.
    :param api_key: sent the API's way (``x-api-key`` for Anthropic, ``x-goog-api-key`` for
        Gemini, a Bearer token otherwise); never shown in a repr, a log line, a segment or a
        resume token. Without it no key is sent: never the client's, and no environment
        variable is read (an ``OPENAI_API_KEY`` is not for a third party's host).
    :param model: the model to ask for there (``None``: the request's own).
    :param max_tokens: the length cap to send there (``None``: the request's own).
    :param headers: headers added to every request sent there (a credential among them is
        checked as the client checks its own, and replaces the key, as a gateway's
        ``Authorization`` does).
    :param name: how segments, handoff events, logs and resume tokens name it (default:
        host, port, path and API). Two upstreams of one route need two names: a second
        account of one provider (the same URL and API) is refused without one.

    Two upstreams are equal when every field is, secrets included (compared as a
    fingerprint); a repr shows the URL without credentials or query values,
    ``api_key=set``/``none``, and header names only.
    """

    base_url: str = field(compare=False)
    api: str = "chat_completions"
    api_key: str | None = field(default=None, repr=False, compare=False)
    model: str | None = None
    max_tokens: int | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    name: str | None = None

    def __init__(
        self,
        base_url: str,
        *,
        api: str = "chat_completions",
        api_key: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        _check_url(base_url)
        _check_api(api)
        if api_key is not None:
            if not isinstance(api_key, str):
                raise TypeError(f"Upstream api_key is a str, not {type(api_key).__name__}")
            api_key = header_safe(api_key, "Upstream api_key", "the key")
        if model is not None and (not isinstance(model, str) or not model):
            raise ValueError("Upstream model is a non-empty str (or None: the request's own)")
        if max_tokens is not None and (
            type(max_tokens) is not int or max_tokens < 1
        ):
            raise ValueError(f"Upstream max_tokens is a positive int, not {max_tokens!r}")
        if headers is not None and not isinstance(headers, Mapping):
            try:  # (name, value) pairs, as the field holds them (dataclasses.replace)
                headers = dict(headers)
            except (TypeError, ValueError):
                raise TypeError("Upstream headers map str names to str values") from None
        pairs = tuple(
            (key.lower(), value)
            for key, value in checked_headers(headers, "Upstream headers").items()
        )
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError("Upstream name is a non-empty str (or None)")
        values: dict[str, object] = {
            "base_url": base_url, "api": api, "api_key": api_key, "model": model,
            "max_tokens": max_tokens, "headers": pairs, "name": name,
        }
        for attr, given in values.items():
            object.__setattr__(self, attr, given)

    def __repr__(self) -> str:
        return (
            f"Upstream(base_url={shown_url(self.base_url)!r}, api={self.api!r}, "
            f"api_key={'set' if self.api_key else 'none'}, model={self.model!r}, "
            f"max_tokens={self.max_tokens!r}, headers={tuple(k for k, _ in self.headers)!r}, "
            f"name={self.name!r})"
        )

    def _compared(self) -> tuple[object, ...]:
        """What equality and the hash compare: the fields, those that may hold a secret (the
        URL, the key, the headers) as a fingerprint. The dataclass compares only the others
        itself (``compare=False``), so a failed ``assert a == b`` in pytest, which explains a
        dataclass field by field, never prints a secret."""
        return (self.api, self.model, self.max_tokens, self.name,
                fingerprint(self.base_url, self.api_key, self.headers))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Upstream):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Copied or pickled, an upstream is made again (checked as when it was made)."""
        return _rebuilt, (self.base_url, self.api, self.api_key, self.model, self.max_tokens,
                          self.header_map, self.name)

    @property
    def label(self) -> str:
        """The name segments, handoff events, logs and resume tokens use: ``name``, else
        :func:`place_label` of the base URL and API."""
        return self.name if self.name is not None else place_label(self.base_url, self.api)

    @property
    def identity(self) -> str:
        """Its circuit breaker's entry: the label and a fingerprint of its credentials (key,
        the URL's own credentials and query, credential headers), so that two accounts named
        alike in different requests are two upstreams; the key itself is never kept there."""
        secrets = fingerprint(self.base_url, self.api_key, credential_headers(self.headers))
        return f"{self.label}#{secrets}"

    @property
    def header_map(self) -> dict[str, str]:
        """:attr:`headers` as a dict (lowercased names)."""
        return dict(self.headers)


def _rebuilt(
    base_url: str, api: str, api_key: str | None, model: str | None, max_tokens: int | None,
    headers: dict[str, str], name: str | None,
) -> Upstream:
    return Upstream(base_url, api=api, api_key=api_key, model=model, max_tokens=max_tokens,
                    headers=headers, name=name)


def _check_api(api: Any) -> None:
    """``api`` is a registered API's name, or the registry's error (a ``LookupError``)
    repeating it only when it has the shape of a name."""
    try:
        apis.get(api)
    except apis.UnknownApiError:
        if isinstance(api, str) and _API_NAME.fullmatch(api):
            raise
        raise apis.UnknownApiError(
            f"Upstream api is not the name of an API; known: {', '.join(apis.names())}"
        ) from None


def _check_url(url: Any) -> None:
    if not isinstance(url, str):
        raise TypeError(f"Upstream base_url is a str, not {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ValueError("Upstream base_url is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Upstream base_url needs http:// or https:// and a host")


@dataclass(frozen=True)
class Failover:
    """When a stream moves to the next upstream.

    :param per_upstream_attempts: requests sent to one upstream before content (its own
        retries) before the next one is asked; a failure the retry policy would not retry
        (a 400, a 401) ends the stream as it would without fallbacks.
    :param cooldown_failures: failures within ``cooldown_window`` seconds after which an
        upstream is skipped (a circuit breaker, per client) for ``cooldown`` seconds.
    :param hedge_after: seconds after the request at which, with no content yet from the
        upstream asked first, the same request is sent to the next upstream too (hedging:
        a slow first token is the usual tail of a request); the first of the two to deliver
        content serves the reply and the other is closed at once, its request kept in
        ``reply.segments`` (``ended="lost hedge"``). Only before content; ``None``: never.
        Per request with ``failover=Failover(hedge_after=...)``.
    :param shared_headers: names of headers that go to every upstream too, with the value
        the client's ``headers=`` or the request's ``extra_headers=`` gives them (a request
        id, a tenant tag). Every other header of the client and the request stays with the
        client's own base URL: a credential never crosses to another provider, and neither
        does a provider's own header (``anthropic-beta``, ``OpenAI-Organization``,
        ``x-goog-user-project``). A credential's name (``auth``, ``key``, ``token``,
        ``secret``, ``cookie``, ``session``... in it) cannot be shared: a ``ValueError``.
        An upstream's own ``headers`` win over a shared one of the same name.
    """

    per_upstream_attempts: int = 2
    cooldown_failures: int = 3
    cooldown_window: float = 30.0
    cooldown: float = 30.0
    hedge_after: float | None = None
    shared_headers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.per_upstream_attempts) is not int or self.per_upstream_attempts < 1:
            raise ValueError("per_upstream_attempts is an int of at least 1")
        if type(self.cooldown_failures) is not int or self.cooldown_failures < 1:
            raise ValueError("cooldown_failures is an int of at least 1")
        for name in ("cooldown_window", "cooldown"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} is a finite number of seconds, at least 0")
        hedge = self.hedge_after
        if hedge is not None and (
            isinstance(hedge, bool) or not isinstance(hedge, (int, float))
            or not math.isfinite(hedge) or hedge <= 0
        ):
            raise ValueError(
                f"hedge_after is a finite number of seconds above 0 (or None), not {hedge!r}"
            )
        object.__setattr__(self, "shared_headers", _shared_names(self.shared_headers))


def _shared_names(names: Any) -> tuple[str, ...]:
    """``shared_headers`` as lowercased header names, none of them a credential's (refused
    without repeating it: a key passed where a name goes must not be shown)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise TypeError("shared_headers is a sequence of header names (a tuple of str)")
    shared: list[str] = []
    for index, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"shared_headers[{index}] is a str, not {type(name).__name__}")
        if not HEADER_NAME.fullmatch(name):
            raise ValueError(f"shared_headers[{index}]: {bad_name(name)}")
        if CREDENTIAL_NAME.search(name):
            raise ValueError(
                f"shared_headers[{index}] names a credential (auth, key, token, secret, cookie,"
                " session... in its name): a credential is never sent to another upstream;"
                " give each Upstream its own api_key or headers"
            )
        if name.lower() not in shared:
            shared.append(name.lower())
    return tuple(shared)
