"""From a decoded request to the answer sent: the key check, a ``status`` fault, the route.

Every per-API difference is read from :mod:`.dialect_table` (which dialect owns the path, how
it takes a key, how it words an error, what each route answers), so this order of checks is
the same for every API: the key first (a wrong key never learns whether a path exists), then
a ``status=C`` fault (it stands for a provider that fails whatever is asked), then the route
(405 for a known path with another method, 404 for an unknown one).
"""

from __future__ import annotations

from dataclasses import replace

from .answers import Call, Payload, Refusal
from .connection import Connection
from .dialect_table import dialect_of, find_route
from .error_shapes import OPENAI_ERRORS, ErrorShape, status_phrase
from .faults import Faults
from .streaming import send_answer

__all__ = ["dispatch", "refuse", "status_fault"]


async def refuse(conn: Connection, path: str, refusal: Refusal) -> None:
    """Send ``refusal`` worded as the API that owns ``path`` words its errors."""
    await send_answer(conn, refusal, dialect_of(path).errors)


async def dispatch(conn: Connection, call: Call, api_key: str | None) -> None:
    """Answer ``call`` (see the module docstring for the order of checks)."""
    dialect = dialect_of(call.path)
    if api_key is not None:
        refusal = dialect.key_check(call, api_key)
        if refusal is not None:
            await send_answer(conn, refusal, dialect.errors)
            return
    if conn.faults.status is not None:
        await send_answer(conn, status_fault(conn.faults, dialect.errors), dialect.errors)
        return
    found = find_route(call.path)
    if found is None:
        message = f"Invalid URL ({call.method} {call.path})"
        await send_answer(conn, Refusal(404, message, code="not_found"), dialect.errors)
        return
    route, match = found
    if call.method != route.method:
        allow = (("allow", route.method),)
        refusal = Refusal(405, "Method not allowed", code="method_not_allowed", headers=allow)
        # In OpenAI's shape whatever the API: a wrong method is the caller's bug, never a
        # condition a client handles, so its wording is kept one for every path.
        await send_answer(conn, refusal, OPENAI_ERRORS)
        return
    answer = route.answer(replace(call, match=match))
    await send_answer(conn, answer, dialect.errors, call.header("last-event-id"))


def status_fault(faults: Faults, errors: ErrorShape) -> Payload:
    """The answer of a ``status=C`` fault: ``errors``' body for that status, or an HTML error
    page (``status-body=html``, what a proxy in front of the API sends)."""
    status = faults.status or 500
    extra = tuple((name, value) for name, value in (
        ("retry-after", faults.retry_after), ("retry-after-ms", faults.retry_after_ms),
        ("x-should-retry", faults.should_retry)) if value)
    phrase = status_phrase(status)
    if faults.status_body == "html":
        html = (
            f"<html><head><title>{status} {phrase}</title></head><body>"
            f"<center><h1>{status} {phrase}</h1></center><hr><center>fluxstream</center>"
            "</body></html>\n"
        )
        return Payload(status, html.encode(), "text/html; charset=utf-8", extra)
    return Payload(status, errors.fault_body(status, phrase), headers=extra)
