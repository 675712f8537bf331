"""Signed resume tokens: a token that passed through untrusted hands is believed only if signed.

A resume token names the request it replays (model, messages, length cap) and where the
reply stood. Checked as data (:mod:`fluxstream._core.resume_token`), a forged token still
cannot choose a host, path, upstream or API, but it can choose the model and the request,
which is someone else's cost, and the event id or sequence number a reply goes on from,
which no check against the reply can catch. A client given a secret signs every token it
issues, and refuses an unsigned or altered token before anything is sent.

The signature is HMAC-SHA256 (stdlib :mod:`hmac`) over the token's canonical JSON: the
token as pydantic-core writes it (what the relay stores, and it writes what a request body
may hold and ``json`` cannot, such as a ``datetime``) and reads it back, then keys sorted,
compact, ASCII, and every number as JSON readers agree on it (an integral float is an
integer: JavaScript's ``JSON.stringify`` writes ``1.0`` as ``1``), so a token that went
through JSON in any language still verifies; only a number beyond 2**53 (which JavaScript
cannot hold exactly) or a reordered list breaks it. The comparison is constant-time. Keys
rotate: a client holds several secrets, signs with the first and accepts any of them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pydantic_core

from ..errors import ResumeTokenError

__all__ = ["SIGNATURE", "Revealing", "TokenSigner", "canonical"]

#: The token's field that holds its signature.
SIGNATURE = "signature"
_SCHEME = "hmac-sha256:"
#: Ahead of every signed message, so that a MAC made for a token is good for nothing else
#: signed with the same secret.
_CONTEXT = b"fluxstream resume token\x00"
#: Integral floats below this are written as integers (every JSON reader holds them exactly).
_EXACT = 2**53
_JSON_ERRORS = (TypeError, ValueError, RecursionError)


class Revealing(Protocol):
    """A secret that shows itself only when asked (the client's masked ``Secret``)."""

    def reveal(self) -> str: ...


class TokenSigner:
    """Signs the resume tokens a client issues and checks the ones it is given.

    Holds the client's secrets as they are kept (masked, revealed only to compute a MAC); its
    repr says how many there are, never what they are.
    """

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Sequence[Revealing]) -> None:
        if not secrets:
            raise ValueError("a TokenSigner needs at least one secret")
        self._secrets = tuple(secrets)

    def __repr__(self) -> str:
        return f"<TokenSigner with {len(self._secrets)} secret(s), not shown>"

    def sign(self, token: dict[str, Any]) -> dict[str, Any]:
        """``token`` with its signature (made with the first secret) set in place."""
        token.pop(SIGNATURE, None)
        token[SIGNATURE] = _SCHEME + _mac(self._secrets[0], canonical(token))
        return token

    def verify(self, token: object) -> None:
        """Nothing if ``token`` carries the signature of one of the secrets over exactly its
        parts; else :class:`ResumeTokenError` (which never shows a secret or a MAC)."""
        if not isinstance(token, Mapping):
            raise ResumeTokenError(f"a resume token is a mapping, not {type(token).__name__}")
        given = token.get(SIGNATURE)
        if given is None:
            raise ResumeTokenError(
                "the resume token is not signed: this client (token_secret=...) resumes only "
                "the tokens signed with its secret"
            )
        if not (isinstance(given, str) and given.isascii() and given.startswith(_SCHEME)):
            raise ResumeTokenError("the resume token's signature is not one fluxstream writes")
        try:
            message = canonical(token)
        except _JSON_ERRORS:
            raise ResumeTokenError("the resume token is not JSON, so it cannot be signed") from None
        digest = given[len(_SCHEME):]
        # Every secret is tried, matching or not: how long it takes says nothing.
        matches = [hmac.compare_digest(_mac(secret, message), digest) for secret in self._secrets]
        if not any(matches):
            raise ResumeTokenError(
                "the resume token's signature does not match: the token was altered, or "
                "signed with a secret this client does not hold"
            )


def _mac(secret: Revealing, message: bytes) -> str:
    return hmac.new(secret.reveal().encode("utf-8"), _CONTEXT + message, hashlib.sha256).hexdigest()


def canonical(token: Mapping[str, Any]) -> bytes:
    """What is signed: ``token`` without its signature, as JSON reads it back (object keys
    are strings, tuples are lists, a ``datetime`` its ISO text), numbers as every JSON reader
    agrees on them, keys sorted, compact and ASCII."""
    unsigned = {name: value for name, value in token.items() if name != SIGNATURE}
    plain = pydantic_core.from_json(pydantic_core.to_json(unsigned))
    return json.dumps(
        _agreed_numbers(plain), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    ).encode("ascii")


def _agreed_numbers(value: Any) -> Any:
    """``value`` (JSON as Python reads it) with each integral float below 2**53 as an int."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_EXACT < value < _EXACT else value
    if isinstance(value, dict):
        return {name: _agreed_numbers(inner) for name, inner in value.items()}
    if isinstance(value, list):
        return [_agreed_numbers(inner) for inner in value]
    return value
