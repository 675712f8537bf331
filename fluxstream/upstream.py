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

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import apis

__all__ = ["Failover", "Upstream", "place_label"]


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


@dataclass(frozen=True)
class Upstream:
    """One place a reply can come from.

    :param base_url: the API root (``https://api.anthropic.com``, ``http://127.0.0.1:8080/v1``).
    :param api: the registered API it speaks (:func:`fluxstream.apis.names`); the request is
        translated into it (messages, system prompt, length cap, tools), so an Anthropic
        primary may fall back on a Chat Completions server.
    :param api_key: sent the API's way (``x-api-key`` for Anthropic, a Bearer token
        otherwise); never shown in a repr, a log line, a segment or a resume token.
    :param model: the model to ask for there (``None``: the request's own).
    :param max_tokens: the length cap to send there (``None``: the request's own).
    :param headers: headers added to every request sent there (over the client's).
    :param name: how segments, handoff events and logs name it (default: host, port and API).
    """

    base_url: str
    api: str = "chat_completions"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    max_tokens: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
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
        apis.get(api)  # UnknownApiError (a LookupError) naming the known APIs
        if api_key is not None and not isinstance(api_key, str):
            raise TypeError(f"Upstream api_key is a str, not {type(api_key).__name__}")
        if model is not None and (not isinstance(model, str) or not model):
            raise ValueError("Upstream model is a non-empty str (or None: the request's own)")
        if max_tokens is not None and (
            type(max_tokens) is not int or max_tokens < 1
        ):
            raise ValueError(f"Upstream max_tokens is a positive int, not {max_tokens!r}")
        pairs: list[tuple[str, str]] = []
        for key, value in (headers or {}).items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError("Upstream headers map str names to str values")
            pairs.append((key.lower(), value))
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError("Upstream name is a non-empty str (or None)")
        values: dict[str, object] = {
            "base_url": base_url, "api": api, "api_key": api_key, "model": model,
            "max_tokens": max_tokens, "headers": tuple(pairs), "name": name,
        }
        for attr, given in values.items():
            object.__setattr__(self, attr, given)

    @property
    def label(self) -> str:
        """The name segments, handoff events, logs, the circuit breaker and resume tokens use:
        ``name``, else :func:`place_label` of the base URL and API."""
        return self.name if self.name is not None else place_label(self.base_url, self.api)

    @property
    def header_map(self) -> dict[str, str]:
        """:attr:`headers` as a dict (lowercased names)."""
        return dict(self.headers)


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
    """

    per_upstream_attempts: int = 2
    cooldown_failures: int = 3
    cooldown_window: float = 30.0
    cooldown: float = 30.0
    hedge_after: float | None = None

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
