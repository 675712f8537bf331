"""Lone UTF-16 surrogate halves in JSON payloads, for every format.

Why: servers that cut text by UTF-16 unit (Node-based ones) send an emoji's high half
(``"\\ud83d"``) at the end of one chunk and its low half at the start of the next. Each payload
is then valid JSON for ``json.loads`` (which keeps lone halves) but not for
``pydantic_core.from_json`` (which rejects them), and a Python ``str`` holding a lone half
cannot be encoded to UTF-8 (``model_dump_json`` refuses it).

How a format uses this (the joining itself is
:class:`fluxstream.formats._choice_state.ChoiceState`'s, for every format): decode with the
fast ``from_json``; only when it raises, try :func:`fallback_loads`, and from then on treat
the payload's strings as possibly holding halves. Per channel (choice + text/reasoning/refusal/
tool call) the format holds a trailing high half (:func:`is_high_half`) back and puts it in
front of the channel's next fragment, so the pair is delivered as one code point (offsets
count it once); every fragment then goes through :func:`fix_surrogates`. A half still held
when its choice ends is delivered as :data:`REPLACEMENT`.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "REPLACEMENT",
    "SURROGATE",
    "clean_tree",
    "fallback_loads",
    "fix_surrogates",
    "is_high_half",
]

SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def fallback_loads(data: str) -> Any:
    """The payload decoded by ``json.loads``, which (unlike ``from_json``) accepts lone
    surrogate escapes; ``None`` when it fails too or when there is no escape to blame (the
    fallback must not accept anything else the fast decoder rightly rejects: NaN, ...)."""
    if "\\u" not in data:
        return None
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def fix_surrogates(text: str) -> str:
    """Join surrogate pairs into code points; every lone half becomes U+FFFD."""
    if SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def is_high_half(char: str) -> bool:
    """``char`` (one character, or ``""``) is a high surrogate half: held for the next
    fragment, whose first character may be its low half."""
    return "\ud800" <= char <= "\udbff"


def clean_tree(value: Any) -> Any:
    """``value`` (decoded JSON) with every lone surrogate in its strings replaced, so that
    usage and error payloads serialise (``model_dump_json`` refuses lone surrogates). One
    C-level round trip, and only when a surrogate is there at all; ``None`` if ``value`` is
    not JSON-serialisable."""
    try:
        dumped = json.dumps(value, ensure_ascii=False)
        if SURROGATE.search(dumped) is None:
            return value
        return json.loads(fix_surrogates(dumped))
    except (TypeError, ValueError, RecursionError):
        return None
