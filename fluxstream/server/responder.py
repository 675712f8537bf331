"""One request on a connection, from its bytes to its records: the request's validation.

The body is checked before it is decoded (:mod:`.request_body`), the profile set and the
faults are chosen (the request's own, key by key over the server's), the attempt is counted
(for ``fail-first``), the request is recorded, :func:`~.dispatch.dispatch` answers it, and how
the answer ended is recorded, whatever ended it: tests prove cancellation and drops from
those records.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal, Protocol

import anyio
import h11

from .answers import Call, Memory, Refusal, header
from .connection import ClientGone, Connection, Dropped
from .dialect_table import dialect_of
from .dispatch import dispatch, refuse
from .faults import FaultError, Faults, build_faults, parse_fault_spec
from .plan import NOTHING_PLANNED, Planned, RequestPlan
from .profiles import ProfileError, parse_profiles, split_model
from .rate_window import RateWindow, rate_headers
from .records import Records, RequestRecord, ResponseRecord
from .request_body import MAX_JSON_VALUES, more_values_than, parse_body
from .streaming import send_answer

__all__ = [
    "ATTEMPT_HEADER",
    "FAULT_HEADER",
    "MAX_STORED_RESPONSES",
    "PROFILE_HEADER",
    "Responder",
    "Settings",
]

#: Request header naming quirk profiles for this response (``azure,heartbeats``), in place
#: of the server's own (a ``model`` suffix does the same).
PROFILE_HEADER = "X-Fluxstream-Profile"
#: Request header with faults for this response (``drop-after=400,fail-first=1``); key by
#: key, it overrides the server's own faults.
FAULT_HEADER = "X-Fluxstream-Fault"
#: Request header that ties the attempts of one reply together, so ``fail-first=N`` counts a
#: resume whose request differs (a continuation body, a ``starting_after`` GET) as the next
#: attempt of the same reply; without it, attempts are counted by method, path and body.
ATTEMPT_HEADER = "X-Fluxstream-Attempt-Key"
#: Background responses kept for ``GET /v1/responses/{id}`` (oldest dropped beyond this).
MAX_STORED_RESPONSES = 1024
#: Attempt keys remembered before the count starts over (bounds a long-running server).
MAX_ATTEMPT_KEYS = 100_000
#: Request headers whose values are secrets: recorded as ``<redacted>`` (a scheme kept).
SECRET_HEADERS = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie",
})

Ending = Literal["complete", "dropped", "client-disconnect", "shutdown"]


class Settings(Protocol):
    """What a responder reads from its server at every request."""

    @property
    def profiles(self) -> frozenset[str]: ...
    @property
    def fault_spec(self) -> Mapping[str, str]: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def records(self) -> Records: ...
    @property
    def plan(self) -> RequestPlan | None: ...


class Responder:
    """Answers the requests of one server (its attempt counts and memory are the server's)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.memory = Memory(MAX_STORED_RESPONSES)
        self.attempts: dict[str, int] = {}
        self.request_seq = 0
        self.rate_window = RateWindow()

    async def respond(self, conn: Connection, request: h11.Request, body: bytearray) -> bool:
        """Answer one request; ``False`` if the connection must close afterwards. ``body`` is
        emptied once decoded: a large one is not kept next to its decoded copies."""
        headers = tuple(
            (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in request.headers
        )
        method = request.method.decode("ascii", "replace")
        path, _, query = request.target.decode("latin-1").partition("?")
        if more_values_than(body, MAX_JSON_VALUES):
            # Not decoded (nor recorded): decoding is what would cost.
            message = f"request body holds more than {MAX_JSON_VALUES} JSON values"
            await refuse(conn, path, Refusal(413, message, close=True))
            return False
        body_bytes, body_hash = len(body), hashlib.sha256(body).hexdigest()
        parsed, problem = parse_body(body)
        body.clear()
        conn.faults = Faults()
        conn.body_bytes = 0
        conn.events = 0
        conn.status = 0
        names: frozenset[str] = frozenset()
        spec: dict[str, str] = {}
        faults = Faults()
        plan = self.settings.plan
        planned = NOTHING_PLANNED if plan is None else plan.plan(
            method, path, query, headers, parsed
        )
        try:
            names = self._profiles_for(headers, parsed) | planned.profiles
            spec = {**self.settings.fault_spec, **planned.faults,
                    **parse_fault_spec(header(headers, FAULT_HEADER))}
            faults = build_faults(spec)
        except (ProfileError, FaultError) as exc:
            problem = problem or str(exc)
        attempt = self._count_attempt(headers, method, path, body_hash)
        if faults.fail_first is not None and attempt > faults.fail_first:
            faults = faults.cleared()
        self.request_seq += 1
        seq = conn.request_seq = self.request_seq
        conn.extra_headers = []
        if faults.rate_limit is not None:
            faults = self._rate_limited(conn, faults, seq)
        records = self.settings.records
        records.requests.append(RequestRecord(
            seq=seq,
            connection=conn.id,
            method=method,
            path=path,
            headers=[
                (k, _redact(v) if k in SECRET_HEADERS else v) for k, v in headers
            ],
            json=parsed,
            body_bytes=body_bytes,
            time=time.monotonic(),
            profiles=tuple(sorted(names)),
            faults=spec,
            attempt=attempt,
            last_event_id=header(headers, "last-event-id"),
        ))
        call = Call(method, path, query, headers, parsed, names, self.memory, None,
                    planned.reply)
        ending: Ending = "shutdown"
        try:
            with anyio.CancelScope() as scope:
                conn.response_scope = scope
                if problem is not None:
                    await refuse(conn, path, Refusal(400, problem))
                else:
                    conn.faults = faults
                    await self._answer(conn, call, planned)
                ending = "complete"
            if scope.cancelled_caught or conn.disconnected:
                ending = "client-disconnect"
                return False
            return not conn.closing
        except Dropped:
            ending = "dropped"
            conn.closing = True
            conn.reset = conn.faults.drop_reset
            return False
        except ClientGone:
            ending = "client-disconnect"
            return False
        except h11.LocalProtocolError:  # e.g. a body for HEAD: close rather than guess
            conn.closing = True
            return False
        finally:
            conn.response_scope = None
            if conn.disconnected and ending == "shutdown":
                ending = "client-disconnect"
            records.responses.append(ResponseRecord(
                request=seq,
                connection=conn.id,
                status=conn.status,
                body_bytes=conn.body_bytes,
                events=conn.events,
                ending=ending,
                time=time.monotonic(),
            ))
            records.trim()

    async def _answer(self, conn: Connection, call: Call, planned: Planned) -> None:
        """The plan's own answer when it gave one, else the route's."""
        if planned.answer is None:
            await dispatch(conn, call, self.settings.api_key)
        else:
            await send_answer(conn, planned.answer, dialect_of(call.path).errors)

    def _rate_limited(self, conn: Connection, faults: Faults, seq: int) -> Faults:
        """Count the request in the server's window; state the limit in every answer's
        headers, and answer 429 past it (see :mod:`.rate_window`)."""
        now = time.time()
        limit = faults.rate_limit or 0
        fits, left, reset_in = self.rate_window.take(limit, faults.rate_window, now)
        conn.extra_headers = rate_headers(
            faults.rate_headers, limit, left, reset_in, now, f"req_{seq}")
        if fits:
            return faults
        return replace(faults, status=429, retry_after_ms=str(max(1, round(reset_in * 1000))),
                       should_retry="true")

    def _profiles_for(self, headers: tuple[tuple[str, str], ...], parsed: Any) -> frozenset[str]:
        """The request's profiles (header and model suffix), else the server's."""
        named = header(headers, PROFILE_HEADER)
        model = parsed.get("model") if isinstance(parsed, dict) else None
        suffix = split_model(model)[1] if isinstance(model, str) else None
        if named is None and suffix is None:
            return self.settings.profiles
        return parse_profiles(named) | parse_profiles(suffix)

    def _count_attempt(
        self, headers: tuple[tuple[str, str], ...], method: str, path: str, body_hash: str
    ) -> int:
        """The attempt number: by the attempt-key header, else by method, path and the
        body's hash (of its raw bytes: no decoded copy of a body that may be megabytes)."""
        key = header(headers, ATTEMPT_HEADER)
        if key is None:
            key = f"{method} {path} {body_hash}"
        if key not in self.attempts and len(self.attempts) > MAX_ATTEMPT_KEYS:
            self.attempts.clear()
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.attempts[key]


def _redact(value: str) -> str:
    scheme, sep, _ = value.partition(" ")
    return f"{scheme} <redacted>" if sep else "<redacted>"
