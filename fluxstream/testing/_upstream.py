"""The upstream a test talks to: the embedded server, per test, on 127.0.0.1, told by the test.

It is the embedded server itself (:class:`~fluxstream.server.ServerThread`: the four APIs, the
providers' quirks, the faults, the records) with a :class:`~fluxstream.server.plan.RequestPlan`
the test fills: replies and faults are schedules the requests take from in order, so "the
first request gets a 429, the second drops after three events, the third is served" is
written the way it is said. The server runs on its own event loop in a thread, so one
fixture serves sync tests, asyncio and trio tests alike, and every client (an SDK's own
thread pool included).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from ..server import ServerThread
from ..server.answers import Answer
from ..server.plan import NOTHING_PLANNED, Planned
from ..server.records import POLL_INTERVAL, DisconnectRecord, RequestRecord, ResponseRecord
from ..server.responder import SECRET_HEADERS
from ..server.scripted import ScriptedReply
from ._spec import ScheduledFault, ScriptError, fault_from, reply_from

__all__ = ["LOOPBACK", "SECRET_QUERY_KEYS", "AnswerSource", "ScriptError", "Upstream", "configure"]

#: The only address the kit's servers listen on.
LOOPBACK = "127.0.0.1"
#: Query parameters whose values are secrets (Gemini takes its key as ``?key=``).
SECRET_QUERY_KEYS = frozenset({"key", "api_key", "api-key", "access_token", "token", "sig"})


class AnswerSource:
    """Whole answers for requests, instead of the routes' (a cassette)."""

    def answer(self, seq: int, method: str, path: str, query: str,
               headers: tuple[tuple[str, str], ...], body: Any) -> Answer | None:
        """The answer to request ``seq`` (1-based), or ``None`` for the route's."""
        return None


class _Schedule:
    """Replies or faults for the coming requests: counted ones first, in the order given,
    each for its ``times`` requests; the standing one (``times=None``, the latest given)
    for every request no counted one takes."""

    def __init__(self) -> None:
        self.counted: list[list[Any]] = []
        self.standing: Any = None

    def add(self, item: Any, times: int | None) -> None:
        if times is None:
            self.standing = item
        else:
            self.counted.append([item, times])

    def take(self) -> Any:
        """What the next request gets (``None``: nothing scripted)."""
        if not self.counted:
            return self.standing
        head = self.counted[0]
        head[1] -= 1
        if head[1] <= 0:
            self.counted.pop(0)
        return head[0]


class _Plan:
    """The test's plan, asked by the server's loop, changed from the test's thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replies = _Schedule()
        self.faults = _Schedule()
        self.secrets: set[str] = set()
        self.source: AnswerSource | None = None
        self.seq = 0

    def plan(self, method: str, path: str, query: str,
             headers: tuple[tuple[str, str], ...], body: Any) -> Planned:
        with self.lock:
            self.secrets.update(v for k, v in headers if k in SECRET_HEADERS and v)
            self.secrets.update(
                v for k, v in parse_qsl(query) if k.lower() in SECRET_QUERY_KEYS and v
            )
            if method == "GET" and path.rstrip("/").endswith("/models"):
                return NOTHING_PLANNED  # a client's model listing takes no reply or fault
            self.seq += 1
            reply: ScriptedReply | None = self.replies.take()
            fault: ScheduledFault | None = self.faults.take()
            source = self.source
        answer = None
        if source is not None:
            answer = source.answer(self.seq, method, path, query, headers, body)
        if reply is None and fault is None and answer is None:
            return NOTHING_PLANNED
        profiles = fault.profiles if fault is not None else frozenset()
        if reply is not None and reply.error:
            profiles |= {"error-midstream"}
        return Planned(
            faults=dict(fault.spec) if fault is not None else {},
            profiles=profiles, reply=reply, answer=answer,
        )


class Upstream(ServerThread):
    """A running upstream for one test: where it listens, what it answers, what it saw.

    ::

        upstream.reply(text="Paris is the capital of France.")
        upstream.drop(after_events=3)             # the next request breaks mid-reply
        client = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test")

    Replies and faults are schedules: one given ``times=N`` applies to the next N requests,
    after those given before it; one given ``times=None`` stands for every request no counted
    one takes (a later one replaces it). A fault's ``times`` defaults to 1, a reply's to
    ``None``, so a retry after a drop gets the same words. A client's model listing takes
    neither. It is a :class:`~fluxstream.server.ServerThread` (``port``, ``url``,
    ``records``, ``wait_disconnect``...) that listens on ``127.0.0.1`` only, at a port the
    OS picks (parallel tests and xdist workers never meet).
    """

    def __init__(self, *, profile: str | None = "openai", api_key: str | None = None) -> None:
        self._plan = _Plan()
        super().__init__(LOOPBACK, 0, profile, api_key, plan=self._plan)

    def start(self, timeout: float = 10.0) -> Upstream:
        """Start listening (re-raises a start-up error)."""
        super().start(timeout)
        return self

    def __enter__(self) -> Upstream:
        return self.start()

    # -- where it listens ---------------------------------------------------------------------

    @property
    def host(self) -> str:
        """Always ``127.0.0.1``: the kit's server is never reachable beyond this machine."""
        return self.server.host

    @property
    def base_urls(self) -> dict[str, str]:
        """The base URL each API's clients take, by the API's name (``chat_completions``,
        ``responses``, ``anthropic_messages``, ``gemini``): ``url`` for the Anthropic SDK and
        google-genai, ``base_url`` (``/v1``) for openai-python, LiteLLM and fluxstream."""
        return {"chat_completions": self.base_url, "responses": self.base_url,
                "anthropic_messages": self.url, "gemini": self.url}

    # -- what it answers ----------------------------------------------------------------------

    def reply(self, **fields: Any) -> Upstream:
        """Script the reply: ``text``, ``reasoning`` (a string, or the list of its deltas),
        ``tool_calls`` (``[{"name": ..., "arguments": {...}}]``), ``usage``
        (``{"prompt_tokens": ..., "completion_tokens": ...}``), ``choices`` (a list of texts or
        of dicts with those fields), ``finish_reason``, ``error`` (an in-band error event after
        the text) and ``times`` (requests it answers; default: every one from then on). A
        malformed field is a :class:`ScriptError` naming it."""
        reply, times = reply_from(fields)
        with self._plan.lock:
            self._plan.replies.add(reply, times)
        return self

    def fault(self, kind: str, **fields: Any) -> Upstream:
        """Schedule a fault of ``kind`` (see :data:`~._spec.FAULT_KINDS`) for the next
        ``times`` requests (default 1), after the faults scheduled before it."""
        scheduled = fault_from(kind, fields)
        with self._plan.lock:
            self._plan.faults.add(scheduled, scheduled.times)
        return self

    def drop(self, *, after_events: int | None = None, after_bytes: int | None = None,
             reset: bool = False, times: int | None = 1) -> Upstream:
        """Close the connection mid-reply: half an event after ``after_events`` events, or
        mid-chunk after ``after_bytes`` body bytes (``reset``: a TCP reset, not a FIN)."""
        return self.fault("drop", after_events=after_events, after_bytes=after_bytes,
                          reset=reset or None, times=times)

    def stall(self, seconds: float, *, after_events: int = 1, heartbeat: float | None = None,
              times: int | None = 1) -> Upstream:
        """Stop sending for ``seconds`` after ``after_events`` events (``heartbeat``: a
        keep-alive every that many seconds meanwhile, as proxies send)."""
        return self.fault("stall", seconds=seconds, after_events=after_events,
                          heartbeat=heartbeat, times=times)

    def slow_first_token(self, seconds: float, *, times: int | None = 1) -> Upstream:
        """Send the response head at once, then nothing for ``seconds``."""
        return self.fault("slow_first_token", seconds=seconds, times=times)

    def fail(self, status: int, *, retry_after: float | str | None = None,
             body: str = "json", times: int | None = 1) -> Upstream:
        """Answer an HTTP error (429, 500, 503, Anthropic's 529 ...), worded as the API
        words it (``body="html"``: a proxy's error page), with ``Retry-After``."""
        return self.fault("fail", status=status, retry_after=retry_after, body=body,
                          times=times)

    def error_event(self, *, times: int | None = 1) -> Upstream:
        """An in-band error event after half of the reply, in the API's own shape."""
        return self.fault("error_event", times=times)

    def close_after_reply(self, seconds: float = 0.0, *, times: int | None = 1) -> Upstream:
        """After a whole reply, close the kept-alive connection without saying so."""
        return self.fault("close_after_reply", seconds=seconds, times=times)

    def malformed_chunk(self, *, after_bytes: int, times: int | None = 1) -> Upstream:
        """After ``after_bytes`` body bytes, a chunk-size line that is not hex, then a close."""
        return self.fault("malformed_chunk", after_bytes=after_bytes, times=times)

    def serve_from(self, source: AnswerSource | None) -> None:
        """Answer with ``source``'s answers (a cassette), else the routes'."""
        with self._plan.lock:
            self._plan.source = source

    # -- what it saw --------------------------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request received, in order: method, path, headers (secrets as
        ``<redacted>``), the JSON ``json`` body, its time."""
        return list(self.records.requests)

    @property
    def request(self) -> RequestRecord:
        """The last request received (``AssertionError`` if none was)."""
        requests = self.requests
        if not requests:
            raise AssertionError("the upstream received no request")
        return requests[-1]

    @property
    def responses(self) -> list[ResponseRecord]:
        """How each answer ended (``complete``, ``dropped``, ``client-disconnect``...), so
        far (:meth:`wait_responses` waits for the last one)."""
        return list(self.records.responses)

    def wait_responses(self, count: int, timeout: float = 2.0) -> list[ResponseRecord]:
        """:attr:`responses` once ``count`` answers have ended: the server records how an
        answer ended just after its last byte, which the client may have read already.
        ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while len(self.records.responses) < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(self.responses)} answers ended within {timeout} s, "
                                   f"not {count}")
            time.sleep(POLL_INTERVAL)
        return self.responses

    @property
    def disconnects(self) -> list[DisconnectRecord]:
        """Each time a client went away, with when, and how much it had been sent."""
        return list(self.records.disconnects)

    @property
    def secrets(self) -> frozenset[str]:
        """The secret values clients sent (keys, tokens, cookies, query keys): what
        :func:`~fluxstream.testing.assert_no_secret_logged` looks for."""
        with self._plan.lock:
            return frozenset(self._plan.secrets)



def configure(upstream: Upstream, reply: Mapping[str, Any] | None,
              faults: Iterable[ScheduledFault]) -> None:
    """A marker's reply and faults, already checked, put on ``upstream``."""
    if reply is not None:
        upstream.reply(**reply)
    with upstream._plan.lock:
        for fault in faults:
            upstream._plan.faults.add(fault, fault.times)

