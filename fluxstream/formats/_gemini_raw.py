"""A JSON object sent outside any ``data:`` line, gathered line by line for
:meth:`~fluxstream.formats.gemini.GeminiFormat.feed_lines`.

Vertex sends an error after the stream began as a raw, pretty-printed JSON body over several
lines, none of them an SSE field; google-genai reads it by gathering lines until the braces
balance (outside strings), and so does :class:`RawObject`. Kept apart from the format because
it is a small scanner of its own, the one place that reads JSON text character by character,
and bounded on its own (:data:`MAX_RAW_CHARS`).
"""

from __future__ import annotations

__all__ = ["MAX_RAW_CHARS", "RawObject"]

#: Characters of raw JSON gathered outside ``data:`` lines before the object is given up
#: (real error bodies are a few hundred bytes; the SSE decoder bounds each line already).
MAX_RAW_CHARS = 1024 * 1024


class RawObject:
    """Lines outside any ``data:`` line, gathered until the JSON braces balance (outside
    strings), as google-genai reads a raw error body sent after the stream began."""

    __slots__ = ("depth", "escaped", "in_string", "lines", "size")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def add(self, line: str) -> str | None:
        """Add one line; the object's text once its braces balance."""
        depth, in_string, escaped = self.depth, self.in_string, self.escaped
        for char in line:
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
        self.depth, self.in_string, self.escaped = depth, in_string, escaped
        self.lines.append(line)
        self.size += len(line)
        return self.take() if depth <= 0 else None

    def take(self) -> str:
        text = "\n".join(self.lines)
        self.__init__()  # type: ignore[misc]
        return text

