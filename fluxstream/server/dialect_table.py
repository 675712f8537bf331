"""The one table of the APIs the server speaks: each dialect's name, routes, key rule and
error shape.

A dialect's name is the API's one name, the same string as the format's
(:data:`fluxstream.formats.FORMATS`), the CLI's ``--format`` and the client's API registry,
so a test can go from one to the other without a mapping. Everything the server does
differently per API is read from this table; the request loop (:mod:`.dispatch`) never
switches on a name or a path.

Adding an API: write its module (the request's translation to the chat request it amounts
to, its events and its JSON object, and its answer function, as :mod:`.render_gemini` does
for ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``), and add one
:class:`Dialect` below: its name, the path prefix it owns, its routes, how it takes a key and
its error shape (:mod:`.error_shapes`, or a new one there).

The server is its providers' stand-in, not the client's mirror: paths, key rules and error
bodies are written here from the providers' documentation, never read from the client's
registry, so a client that builds a wrong path meets a 404 in the tests instead of a server
that shares its mistake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .answers import Answer, Call, Refusal
from .error_shapes import ANTHROPIC_ERRORS, OPENAI_ERRORS, ErrorShape
from .profiles import parse_profiles, split_model
from .render import answer_chat, answer_models, chat_script
from .render_gemini import GEMINI_ERRORS, GEMINI_ROUTE, answer_gemini, gemini_script, google_key
from .render_messages import answer_messages, messages_script
from .render_responses import answer_responses, answer_stored_response, responses_script
from .script import Script

__all__ = [
    "DEFAULT_DIALECT",
    "DIALECTS",
    "Dialect",
    "KeyCheck",
    "Route",
    "anthropic_key",
    "bearer_key",
    "dialect_of",
    "find_route",
    "script_for",
]

#: ``(call, key) -> None`` when the request carries ``key`` the way the API expects, else
#: the refusal to send.
KeyCheck = Callable[[Call, str], Refusal | None]


@dataclass(frozen=True)
class Route:
    """One endpoint: a request whose path matches ``path`` (whole) and whose method is
    ``method`` gets ``answer(call)``; another method gets 405."""

    method: str
    path: re.Pattern[str]
    answer: Callable[[Call], Answer]


@dataclass(frozen=True)
class Dialect:
    """One API as the server speaks it."""

    #: The API's one name (a :data:`fluxstream.formats.FORMATS` key).
    name: str
    #: Paths this API owns (each with everything below it): a request there, routed or not,
    #: is checked with :attr:`key_check` and refused in :attr:`errors`.
    prefixes: tuple[str, ...]
    routes: tuple[Route, ...]
    key_check: KeyCheck
    errors: ErrorShape
    #: The script a request body gets under a profile set (:func:`script_for`).
    script: Callable[[Mapping[str, Any], frozenset[str]], Script]

    def owns(self, path: str) -> bool:
        """``path`` is under one of :attr:`prefixes`, or one of :attr:`routes` matches it
        (Gemini's ``/v1/models/{model}:...`` shares ``/v1/models`` with OpenAI's listing)."""
        return any(path == p or path.startswith(p + "/") for p in self.prefixes) or any(
            route.path.fullmatch(path) for route in self.routes
        )


def bearer_key(call: Call, key: str) -> Refusal | None:
    """OpenAI's rule: ``Authorization: Bearer KEY``, and a 401 that says which part is off."""
    auth = call.header("authorization")
    if auth == f"Bearer {key}":
        return None
    message = (
        "You didn't provide an API key. Provide it as 'Authorization: Bearer KEY'."
        if auth is None
        else "Incorrect API key provided."
    )
    return Refusal(401, message, headers=(("www-authenticate", 'Bearer realm="fluxstream"'),))


def anthropic_key(call: Call, key: str) -> Refusal | None:
    """Anthropic's rule: ``x-api-key: KEY`` (a bearer token is taken too, as gateways send)."""
    if call.header("authorization") == f"Bearer {key}" or call.header("x-api-key") == key:
        return None
    return Refusal(401, "invalid x-api-key")


def _path(pattern: str) -> re.Pattern[str]:
    """``pattern`` under ``/v1`` or at the root (clients give either as their base URL)."""
    return re.compile(rf"(?:/v1)?{pattern}")


DIALECTS: dict[str, Dialect] = {
    dialect.name: dialect
    for dialect in (
        Dialect(
            "chat_completions",
            ("/v1/chat/completions", "/chat/completions"),
            (Route("POST", _path("/chat/completions"), answer_chat),
             Route("GET", _path("/models"), answer_models)),
            bearer_key, OPENAI_ERRORS, chat_script,
        ),
        Dialect(
            "responses",
            ("/v1/responses", "/responses"),
            (Route("POST", _path("/responses"), answer_responses),
             Route("GET", _path("/responses/([A-Za-z0-9_-]{1,128})"), answer_stored_response)),
            bearer_key, OPENAI_ERRORS, responses_script,
        ),
        Dialect(
            "anthropic_messages",
            ("/v1/messages", "/messages"),
            (Route("POST", _path("/messages"), answer_messages),),
            anthropic_key, ANTHROPIC_ERRORS, messages_script,
        ),
        Dialect(
            "gemini",
            ("/v1beta", "/v1/projects"),
            (Route("POST", GEMINI_ROUTE, answer_gemini),),
            google_key, GEMINI_ERRORS, gemini_script,
        ),
    )
}
#: The dialect of a path no API owns (the model listing, a typo): the server is
#: OpenAI-compatible first, so those are answered as OpenAI would.
DEFAULT_DIALECT = DIALECTS["chat_completions"]
#: Older names :func:`script_for` still takes.
_ALIASES = {"chat": "chat_completions", "messages": "anthropic_messages"}


def dialect_of(path: str) -> Dialect:
    """The dialect that owns ``path`` (:data:`DEFAULT_DIALECT` when none does)."""
    return next((d for d in DIALECTS.values() if d.owns(path)), DEFAULT_DIALECT)


def find_route(path: str) -> tuple[Route, re.Match[str]] | None:
    """The route whose path matches ``path``, with the match (its groups are parameters)."""
    for dialect in DIALECTS.values():
        for route in dialect.routes:
            found = route.path.fullmatch(path)
            if found is not None:
                return route, found
    return None


def script_for(
    api: str, body: Mapping[str, Any], profile: Iterable[str] | str | None = None
) -> Script:
    """The script the server streams for ``body`` sent to ``api`` (the API's one name,
    ``"chat_completions"``, ``"responses"``, ``"anthropic_messages"`` or ``"gemini"``;
    ``"chat"`` and ``"messages"`` are taken too) under ``profile`` (and the model's ``@``
    suffix): what a test expects a correct client to assemble. An unknown name is a
    ``ValueError``."""
    name = _ALIASES.get(api, api)
    if name not in DIALECTS:
        raise ValueError(f"unknown API {api!r} (known: {', '.join(DIALECTS)})")
    names = set(parse_profiles(profile))
    model = body.get("model")
    if isinstance(model, str):
        names |= parse_profiles(split_model(model)[1])
    return DIALECTS[name].script(body, frozenset(names))
