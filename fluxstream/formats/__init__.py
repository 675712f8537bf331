"""Wire formats: provider payloads -> normalized :mod:`fluxstream._events`.

Each format is a sans-IO class that takes SSE events (or payloads another SDK already decoded)
and returns normalized events; it knows nothing about transports or the assembled reply. The
contract the parser drives is :class:`~fluxstream.formats._contract.WireFormat`; every format is
built on :class:`~fluxstream.formats._base.FormatBase`, which gives its defaults.

:data:`FORMATS` is the registry: a format's name, as ``StreamParser(format=...)`` takes it, ->
its class. Adding a format is writing its module (its events, its detection rules) and adding
it here; ``auto`` then recognises it.
"""

from __future__ import annotations

from ._contract import FORMATS, WireFormat
from .anthropic_messages import AnthropicMessagesFormat
from .auto import AutoFormat, detect
from .chat_completions import ChatCompletionsFormat
from .gemini import GeminiFormat
from .responses import ResponsesFormat

__all__ = [
    "FORMATS",
    "AnthropicMessagesFormat",
    "AutoFormat",
    "ChatCompletionsFormat",
    "GeminiFormat",
    "ResponsesFormat",
    "WireFormat",
    "detect",
]

# Filled here, created in ``_contract`` (see there why): ``auto`` asks the formats in this
# order, and the first of two equally sure claims wins.
FORMATS.update({
    "chat_completions": ChatCompletionsFormat,
    "responses": ResponsesFormat,
    "anthropic_messages": AnthropicMessagesFormat,
    "gemini": GeminiFormat,
    "auto": AutoFormat,
})
