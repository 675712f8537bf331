"""The registry of APIs: each registered :class:`~fluxstream.apis.Api` by its one name (and
its path, for resume tokens older than names). Kept out of the package's ``__init__`` so that
``fluxstream.apis`` holds its public names only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ResumeTokenError, show_key
from .anthropic_messages import ANTHROPIC_MESSAGES
from .api import Api, UnknownApiError
from .chat_completions import CHAT_COMPLETIONS
from .gemini import GEMINI
from .responses import RESPONSES

__all__ = ["for_token", "get", "names", "registered"]

_REGISTRY: dict[str, Api] = {
    api.name: api for api in (CHAT_COMPLETIONS, RESPONSES, ANTHROPIC_MESSAGES, GEMINI)
}
_BY_PATH: dict[str, Api] = {api.path: api for api in _REGISTRY.values()}
#: The API of a token that names none: tokens were made by ``client.chat`` alone before the
#: other endpoints existed, and carried no path.
_BEFORE_ENDPOINTS = CHAT_COMPLETIONS


def registered() -> tuple[Api, ...]:
    """Every registered API, in registration order."""
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    """The names of the registered APIs (the CLI's ``--format`` choices)."""
    return tuple(_REGISTRY)


def get(name: str) -> Api:
    """The API named ``name``, or :class:`UnknownApiError` listing the known names."""
    api = _REGISTRY.get(name) if isinstance(name, str) else None
    if api is None:
        shown = show_key(name) if isinstance(name, str) else f"a {type(name).__name__}"
        raise UnknownApiError(f"no API is named {shown}; known: {', '.join(_REGISTRY)}")
    return api


def for_token(token: Mapping[str, Any]) -> Api:
    """The API a resume token continues, or :class:`~fluxstream.errors.ResumeTokenError`.

    A token is input (it comes back from a database, a browser, another worker), so what it
    names only *chooses* among the registered APIs; the request goes to that API's own path,
    never to the token's text. A token names its API by ``api``; older ones by ``path`` (the
    API's path, slashes around it allowed), and the oldest by nothing (Chat Completions). A
    token that names both must name one API by both. A token that is no mapping is refused
    here too, so that every way in says so in the same words.
    """
    if not isinstance(token, Mapping):
        raise ResumeTokenError(f"a resume token is a mapping, not {type(token).__name__}")
    named, path = token.get("api"), token.get("path")
    by_path = None if path is None or path == "" else _by_path(path)
    if named is None:
        return by_path or _BEFORE_ENDPOINTS
    api = _REGISTRY.get(named) if isinstance(named, str) else None
    if api is None:
        shown = show_key(named) if isinstance(named, str) else f"a {type(named).__name__}"
        raise ResumeTokenError(
            f"the resume token names no API this client knows ({shown}); a token continues "
            f"one of: {', '.join(_REGISTRY)}"
        )
    if by_path is not None and by_path is not api:
        raise ResumeTokenError(
            f"the resume token names two APIs ({api.name!r} by name, {by_path.name!r} by path)"
        )
    return api


def _by_path(path: object) -> Api:
    api = _BY_PATH.get(path.strip("/")) if isinstance(path, str) else None
    if api is None:
        shown = show_key(path) if isinstance(path, str) else f"a {type(path).__name__}"
        raise ResumeTokenError(
            f"the resume token names no API this client knows ({shown}); a token continues "
            f"one of: {', '.join(_BY_PATH)}"
        )
    return api
