"""``client.responses`` (OpenAI Responses API) and ``client.messages`` (Anthropic Messages).

Both stream through exactly what ``client.chat`` uses — the same :class:`~fluxstream._stream.
ReplyStream`, timeouts, cancellation, retries, resume and error mapping — and differ only in
their API (:mod:`fluxstream.apis`): the request they build and the wire format their parser
reads (``"responses"`` / ``"anthropic_messages"``). Their typed signatures live beside
``client.chat``'s in :mod:`fluxstream._typed_endpoints`, over the one generic endpoint
(:mod:`fluxstream._io.endpoint`); this module is where they have always been imported from,
with :func:`anthropic_client`.

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

import os
from collections.abc import Mapping
from typing import Any

from . import apis
from ._client import AsyncClient
from ._io.base_url import keyless
from ._io.endpoint import completing
from ._typed_endpoints import Messages, Responses
from .apis import Api
from .apis.anthropic_messages import ANTHROPIC_MESSAGES, ANTHROPIC_VERSION

__all__ = [
    "ANTHROPIC_VERSION", "Messages", "Responses", "anthropic_client", "completing", "token_api",
]


def token_api(token: Mapping[str, Any]) -> str:
    """The path of the API ``token`` continues, or ``ResumeTokenError``
    (:func:`fluxstream.apis.for_token` says which API, by name)."""
    return apis.for_token(token).path


def api_client(api: Api, base_url: str | None = None, api_key: str | None = None,
               **kwargs: Any) -> AsyncClient:
    """An :class:`~fluxstream._client.AsyncClient` set up the way ``api``'s own SDK is:
    ``base_url`` falls back to the API's environment variable, then to its public root, and
    is made the API root (:meth:`~fluxstream.apis.Api.root_url`); ``api_key`` falls back to
    the API's key variable; with neither, the client is refused naming that variable
    (:class:`~fluxstream.errors.MissingAPIKeyError`) unless it needs no key (see
    ``AsyncClient``'s ``api_key``). Other arguments as for ``AsyncClient``."""
    base = api.root_url(base_url or os.environ.get(api.base_url_variable) or api.default_base_url)
    key = api_key if api_key is not None else os.environ.get(api.api_key_variable)
    if not key and api_key is None:  # never the client's own OPENAI_API_KEY instead
        key = keyless(base, kwargs.get("headers"), api.api_key_variable)
    return AsyncClient(base, key, **kwargs)


def anthropic_client(base_url: str | None = None, api_key: str | None = None,
                     **kwargs: Any) -> AsyncClient:
    """An :class:`~fluxstream._client.AsyncClient` for Anthropic (or an Anthropic-compatible
    gateway): ``base_url`` falls back to ``ANTHROPIC_BASE_URL``, then
    ``https://api.anthropic.com``; ``/v1`` is appended when missing (Anthropic's base URLs
    name the host, fluxstream's the API root). ``api_key`` falls back to
    ``ANTHROPIC_API_KEY`` (never ``OPENAI_API_KEY``; with neither, see :func:`api_client`).
    Other arguments as for ``AsyncClient``."""
    return api_client(ANTHROPIC_MESSAGES, base_url, api_key, **kwargs)
