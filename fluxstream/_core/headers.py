"""Request headers as values: which names carry a credential, and headers checked before they
are sent, with errors that never show a value.

Sans-IO, below everything that takes headers: the client (its ``headers=``, a request's
``extra_headers=``), an :class:`~fluxstream._upstream.Upstream` (its own ``headers``) and
:class:`~fluxstream._upstream.Failover` (the names shared with every upstream) all check and
classify headers by the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import show_key

__all__ = ["CREDENTIAL_NAME", "HEADER_NAME", "bad_name", "checked_headers", "header_safe"]

#: Parts of a header name that say its value is a credential: ``Authorization``,
#: ``Proxy-Authorization``, ``x-api-key``, Azure's ``api-key``, ``Cookie``, ``X-Auth-Token``,
#: ``Ocp-Apim-Subscription-Key``... A non-secret header caught by this is only checked early
#: (and is never shared with another upstream).
CREDENTIAL_NAME = re.compile(
    "auth|key|token|secret|cookie|passw|session|credential|signature", re.IGNORECASE
)
#: A header name (an RFC 9110 token): anything else is refused by every HTTP library.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def header_safe(value: str, what: str, hidden: str) -> str:
    """A secret as a header carries it. Surrounding whitespace (a key read from a file keeps
    its newline) is dropped: HTTP drops it from a header value anyway. Any other character a
    header cannot carry is refused now, without showing the value: the HTTP library would
    refuse it later with the whole header in its error's text (and httpcore's DEBUG log)."""
    value = value.strip()
    if not (value.isascii() and value.isprintable()):
        raise ValueError(
            f"{what} holds a character an HTTP header cannot carry (a control character or "
            f"non-ASCII); {hidden} is not shown"
        )
    return value


def checked_headers(headers: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    """``headers`` as they will be sent, or a ``ValueError`` that never shows a value.

    Names are checked here, and credentials' values (see :data:`CREDENTIAL_NAME`) as
    ``api_key`` is (:func:`header_safe`): the HTTP library would refuse them on every
    request, with the value in its error's text on httpx (and httpcore's DEBUG log). Every
    value loses its surrounding whitespace (HTTP drops it anyway; a value read from a file
    keeps its newline); ``bytes`` values are taken as ASCII text. What else a value cannot
    carry is refused when the request is sent (``RequestHeaderError``, ``APIConnectionError``).
    """
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise ValueError(f"{what}: {bad_name(name)}")
        shown = f"{what} {show_key(name)}"
        if isinstance(value, bytes):
            try:
                value = value.decode("ascii")
            except UnicodeDecodeError:
                raise ValueError(f"{shown} is not ASCII; its value is not shown") from None
        if not isinstance(value, str):
            raise TypeError(f"{shown} must be a str, not {type(value).__name__}")
        if CREDENTIAL_NAME.search(name):
            value = header_safe(value, shown, "its value")
        out[name] = value.strip()
    return out


def bad_name(name: object) -> str:
    """Why ``name`` cannot be a header name, showing only the part before its first bad
    character (a whole ``"Authorization: Bearer sk-..."`` line passed as a name is common)."""
    if not isinstance(name, str):
        return f"a header name must be a str, not {type(name).__name__}"
    if not name:
        return "an empty header name"
    good = HEADER_NAME.match(name)
    before = show_key(good.group()) if good else "nothing"
    return (
        f"a header name holds a character a name cannot carry (a space, ':', a control "
        f"character or non-ASCII) after {before}; the rest is not shown"
    )
