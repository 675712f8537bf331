"""The JSON error bodies of each API: a client's error handling reads them, so each dialect
answers in its own provider's shape.

OpenAI's (Chat Completions, Responses, the model listing and every path no API claims):
``{"error": {"message", "type", "param", "code"}}``. Anthropic's: ``{"type": "error",
"error": {"type", "message"}}``, with the error type chosen by status. A dialect names its
shape in the dialect table (:mod:`.dialect_table`); nothing else decides which one is sent.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Protocol

from .script import dumps

__all__ = ["ANTHROPIC_ERRORS", "OPENAI_ERRORS", "ErrorShape", "error_json", "status_phrase"]


class ErrorShape(Protocol):
    """How one API words an error."""

    def body(self, status: int, message: str, code: str | None = None) -> bytes:
        """The error body for ``status``; ``code`` is OpenAI's machine-readable code (an
        API without one ignores it)."""
        ...

    def fault_body(self, status: int, phrase: str) -> bytes:
        """The body of a ``status=C`` fault: what that API's servers send for that status."""
        ...


def error_json(message: str, type_: str, code: str | None = None) -> bytes:
    """OpenAI's error body."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return dumps(body).encode()


def status_phrase(status: int) -> str:
    """The reason phrase of ``status`` (``""`` for a status HTTP does not name; Anthropic's
    529 is ``Overloaded``)."""
    if status == 529:
        return "Overloaded"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _fault_message(status: int, phrase: str) -> str:
    return f"fluxstream fault: status {status}" + (f" {phrase}" if phrase else "")


#: The error type and code OpenAI sends for a status, where they are not the default.
_OPENAI_FAULTS: dict[int, tuple[str, str | None]] = {
    429: ("requests", "rate_limit_exceeded"),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
}
#: Anthropic's error type per status.
_ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class _OpenAIErrors:
    def body(self, status: int, message: str, code: str | None = None) -> bytes:
        kind = "invalid_request_error" if status < 500 else "server_error"
        if code is None and status == 401:
            code = "invalid_api_key"
        return error_json(message, kind, code)

    def fault_body(self, status: int, phrase: str) -> bytes:
        default = ("server_error", None) if status >= 500 else ("invalid_request_error", None)
        kind, code = _OPENAI_FAULTS.get(status, default)
        return error_json(_fault_message(status, phrase), kind, code)


class _AnthropicErrors:
    def body(self, status: int, message: str, code: str | None = None) -> bytes:
        default = "api_error" if status >= 500 else "invalid_request_error"
        kind = _ANTHROPIC_TYPES.get(status, default)
        return dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()

    def fault_body(self, status: int, phrase: str) -> bytes:
        # Anthropic's busy signal says only "Overloaded"; other statuses keep the fault's words.
        return self.body(status, phrase if status == 529 else _fault_message(status, phrase))


OPENAI_ERRORS: ErrorShape = _OpenAIErrors()
ANTHROPIC_ERRORS: ErrorShape = _AnthropicErrors()
