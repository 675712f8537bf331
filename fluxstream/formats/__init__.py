"""Wire formats: provider payloads -> normalized :mod:`fluxstream.events`.

Each format is a sans-IO class that takes SSE events (or payloads another SDK already decoded)
and returns normalized events; it knows nothing about transports or the assembled reply.
"""

from __future__ import annotations

from .chat_completions import ChatCompletionsFormat

__all__ = ["FORMATS", "ChatCompletionsFormat"]

#: Format names accepted by :class:`fluxstream.parser.StreamParser`.
FORMATS = {"chat_completions": ChatCompletionsFormat}
