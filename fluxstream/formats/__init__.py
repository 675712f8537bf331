"""Wire formats: provider payloads -> normalized :mod:`fluxstream.events`.

Each format is a sans-IO class that takes SSE events (or payloads another SDK already decoded)
and returns normalized events; it knows nothing about transports or the assembled reply. The
interface the parser drives is :class:`~fluxstream.formats.auto.WireFormat`.
"""

from __future__ import annotations

from typing import Protocol

from .anthropic_messages import AnthropicMessagesFormat
from .auto import AutoFormat, WireFormat, detect
from .chat_completions import ChatCompletionsFormat
from .responses import ResponsesFormat

__all__ = [
    "FORMATS",
    "AnthropicMessagesFormat",
    "AutoFormat",
    "ChatCompletionsFormat",
    "ResponsesFormat",
    "WireFormat",
    "detect",
]


class _FormatClass(Protocol):
    def __call__(self, key: str, *, strict: bool = ...) -> WireFormat: ...


#: Format names accepted by :class:`fluxstream.parser.StreamParser`.
FORMATS: dict[str, _FormatClass] = {
    "chat_completions": ChatCompletionsFormat,
    "responses": ResponsesFormat,
    "anthropic_messages": AnthropicMessagesFormat,
    "auto": AutoFormat,
}
