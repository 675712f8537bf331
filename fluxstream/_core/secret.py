"""Secrets kept masked: the client's key, the credentials of its base URL, its token secrets.

A secret is turned into its text only where it is used (a header built for a request, a MAC
computed), so a repr, a log line or an exception's text can never show it. Sans-IO: the
client's ``token_secret`` is read into a :class:`~fluxstream._core.token_signature.TokenSigner`
here, checked without showing it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .token_signature import TokenSigner

__all__ = ["MIN_TOKEN_SECRET_CHARS", "Secret", "token_signer"]

#: The shortest ``token_secret`` accepted: a shorter one could be found by trying secrets,
#: offline, against any one signed token.
MIN_TOKEN_SECRET_CHARS = 16


class Secret:
    """A string that never shows itself in a repr, a log line or an exception's text."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)


def token_signer(secret: str | Sequence[str] | None) -> TokenSigner | None:
    """The signer of ``token_secret`` (``None``: tokens are neither signed nor checked), its
    secrets kept as :class:`Secret` s; a wrong one is refused without being shown."""
    if secret is None:
        return None
    secrets = [secret] if isinstance(secret, str) else secret
    if not isinstance(secrets, (list, tuple)):
        raise TypeError(
            f"token_secret is a str or a list of str, not {type(secret).__name__} (random "
            "bytes: pass their .hex())"
        )
    kept: list[Secret] = []
    for value in secrets:
        if not isinstance(value, str):
            raise TypeError(
                f"token_secret holds str values, not {type(value).__name__} (random bytes: "
                "pass their .hex())"
            )
        if len(value) < MIN_TOKEN_SECRET_CHARS:
            raise ValueError(
                f"a token_secret has at least {MIN_TOKEN_SECRET_CHARS} characters (such as "
                "secrets.token_hex(32)); the one given is shorter, and not shown"
            )
        kept.append(Secret(value))
    if not kept:
        raise ValueError("token_secret is an empty list: give at least one secret")
    return TokenSigner(kept)
