"""``--fallback``: the upstreams ``fluxstream chat`` moves to when its own endpoint fails
(how a move is shown is :mod:`.render`'s).

A spec is ``URL[,api=...,model=...,key-env=NAME,max-tokens=N,name=...]``. The key is never
part of it: a command line is seen by every user of the machine (``ps``) and kept in shell
history, so ``key-env`` names the environment variable holding it, and a spec carrying a key
(``key=``, a password in the URL, a ``?key=``, ``?access_token=`` or other credential in its
query) is refused without repeating it. A bad spec is an argparse
error naming the part at fault; a message repeats a part only when it has the shape of what
belongs there (an option's or API's name, a variable's name, a short number), which a key
pasted in the wrong place does not, and with control characters shown, never run.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from .. import apis
from .._core.headers import CREDENTIAL_NAME
from .._upstream import Upstream
from .render import visible

__all__ = [
    "FALLBACK_HEADING", "FALLBACK_HELP", "FALLBACK_OPTIONS", "FallbackSpec", "parse_fallback"
]

#: The options a spec may carry after its URL, as ``chat --help`` lists them.
FALLBACK_OPTIONS = {
    "api=API": f"its API (default: --format's): {', '.join(apis.names())}",
    "model=M": "the model to ask for there (default: the request's)",
    "max-tokens=N": "the length cap sent there, in its API's field (default: the request's)",
    "key-env=NAME": "the environment variable holding its key (never the key itself: a"
    " command line is seen by every user of the machine; without key-env no key is sent)",
    "name=LABEL": "how the handoff line and the summary call it (default: host:port/api)",
}
_OPTIONS = tuple(option.partition("=")[0] for option in FALLBACK_OPTIONS)
#: Option names that would put a key on the command line: refused with a pointer to key-env.
_KEY_OPTIONS = frozenset({"key", "api-key", "api_key", "apikey", "token", "password"})

FALLBACK_HELP = (
    "an upstream the reply goes on with when the endpoint fails, before or in the middle of"
    " the reply (repeatable, tried in order; options below)"
)
FALLBACK_HEADING = (
    "fallbacks (--fallback URL[,OPTION=VALUE...]; a handoff is one line on stderr, and the"
    " summary lists each upstream's part):"
)


#: What an error message may repeat of a spec: text of these shapes, which a key pasted in
#: the wrong place does not have (keys are long, and mix digits into lowercase or mixed case).
_WORD = re.compile(r"[a-z][a-z_-]{0,23}")  # an option's name, an API's name
_VARIABLE = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")  # an environment variable's conventional name
_SHORT = re.compile(r".{0,8}")  # a number, or what was meant as one


def _quoted(text: str, shape: re.Pattern[str]) -> str:
    """A part of a spec as an error message shows it: quoted when it has ``shape`` (control
    characters visible), else only its length."""
    if shape.fullmatch(text):
        return repr(visible(text))
    return f"(a value of {len(text)} characters)"


def _url_shown(url: str) -> str:
    """A URL as an error message shows it: without user or password, and only when it
    looks like one (a key pasted where the URL goes is not repeated)."""
    scheme, sep, _ = url.partition("://")
    if not sep or not re.fullmatch(r"[a-zA-Z][a-zA-Z+.]{0,9}", scheme):
        return f"(a value of {len(url)} characters, without http:// or https://)"
    netloc, slash, path = url[len(scheme) + 3:].partition("/")
    return repr(visible(f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"))


@dataclass(frozen=True)
class FallbackSpec:
    """One ``--fallback``, checked; :meth:`upstream` makes the :class:`Upstream` once the
    request's own API (the default) is known. ``key`` holds the key read from ``key-env``;
    it is left out of the repr, as :class:`Upstream` leaves it out of its own."""

    base_url: str
    api: str | None = None
    model: str | None = None
    key_env: str | None = None
    key: str | None = None
    max_tokens: int | None = None
    name: str | None = None

    def __repr__(self) -> str:
        return (f"FallbackSpec(base_url={self.base_url!r}, api={self.api!r},"
                f" model={self.model!r}, key_env={self.key_env!r},"
                f" max_tokens={self.max_tokens!r}, name={self.name!r})")

    def upstream(self, default_api: str) -> Upstream:
        return Upstream(
            self.base_url, api=self.api or default_api, api_key=self.key, model=self.model,
            max_tokens=self.max_tokens, name=self.name,
        )


def _credential_parameter(name: str) -> bool:
    """A query parameter that carries a credential: named as a credential header would be
    (``key``, ``api_key``, ``access_token``, ``X-Amz-Signature``...), or Azure's SAS ``sig``."""
    return bool(CREDENTIAL_NAME.search(name)) or name.lower() == "sig"


def _check_url(url: str) -> str:
    if not url:
        raise argparse.ArgumentTypeError("a fallback needs a URL first: URL[,api=...,...]")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the URL {_url_shown(url)} is not a URL (bad port or brackets)"
        ) from None
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError(
            "the URL carries credentials, which a command line shows to every user of the"
            " machine: name the environment variable holding the key with key-env=NAME"
        )
    if any(_credential_parameter(name)
           for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        raise argparse.ArgumentTypeError(
            "the URL's query carries a credential (a key, token or signature parameter),"
            " which a command line shows to every user of the machine: name the environment"
            " variable holding the key with key-env=NAME"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"the URL {_url_shown(url)} needs http:// or https:// and a host"
        )
    return url


def _positive(option: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1 or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{option}={_quoted(value, _SHORT)} is not a positive integer"
        )
    return number


def _option(spec: dict[str, object], name: str, value: str) -> None:
    """Check one ``name=value`` of a spec and store it under its field name."""
    if not value:
        raise argparse.ArgumentTypeError(f"{name}= has no value")
    if name == "api":
        try:
            apis.get(value)
        except LookupError:
            raise argparse.ArgumentTypeError(
                f"api={_quoted(value, _WORD)} is not an API; one of {', '.join(apis.names())}"
            ) from None
        spec["api"] = value
    elif name == "key-env":
        key = os.environ.get(value)
        if key is None:
            raise argparse.ArgumentTypeError(
                f"key-env={_quoted(value, _VARIABLE)}: that environment variable is not set"
            )
        spec["key_env"], spec["key"] = value, key
    elif name == "max-tokens":
        spec["max_tokens"] = _positive(name, value)
    else:  # model, name: free text, sent or shown as it is
        spec[name] = value


def parse_fallback(text: str) -> FallbackSpec:
    """``--fallback``'s argparse ``type``: the spec checked part by part (a bad one is an
    ``ArgumentTypeError`` naming that part)."""
    url, *rest = text.strip().split(",")
    spec: dict[str, object] = {"base_url": _check_url(url.strip())}
    seen: set[str] = set()
    for part in rest:
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if name in _KEY_OPTIONS:
            raise argparse.ArgumentTypeError(
                f"{name}= would put a key on the command line (shown to every user of the"
                " machine, kept in shell history): name the environment variable holding it"
                " with key-env=NAME"
            )
        if not sep:
            # Not quoted: a stray part may be a key pasted in the wrong place.
            raise argparse.ArgumentTypeError(
                f"a part of {len(part)} characters after the URL is not NAME=VALUE; the options"
                f" are {', '.join(_OPTIONS)}"
            )
        if name not in _OPTIONS:
            raise argparse.ArgumentTypeError(
                f"unknown option {_quoted(name, _WORD)}; the options are {', '.join(_OPTIONS)}"
            )
        if name in seen:
            raise argparse.ArgumentTypeError(f"{name}= is given twice")
        seen.add(name)
        _option(spec, name, value.strip())
    return FallbackSpec(**spec)  # type: ignore[arg-type]
