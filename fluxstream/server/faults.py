"""Fault injection: transport misbehaviour a streaming client must survive.

Faults are given per request with the header ``X-Fluxstream-Fault: k=v[,k=v]`` and/or per server
(``serve(faults="drip=0.01")``); per-request keys override the server's, key by key.
Unknown keys or bad values are answered with 400, so a typo never silently tests nothing.

Keys (sizes in bytes, times in seconds):

``write-size=N``        every socket write is at most N bytes (1 is allowed), headers included
``write-pause=T``       sleep T between those writes (so reads on the client really split)
``drop-after=N``        hard close after N bytes of the *body* (the event stream), mid-chunk,
                        without the chunked terminator
``drop-after-events=N`` hard close after N complete events: half of the next event is written
                        inside its chunk, then the socket closes (no terminator)
``bad-chunk-after=N``   after N bytes of the body (ending a chunk there), a malformed chunk:
                        a chunk-size line that is not hex (``zz``), then the close, without
                        the terminator (a body with Content-Length is just cut there)
``drop-reset=1``        make those closes a TCP reset (SO_LINGER 0) instead of a FIN
``close-after=T``       after the response, keep the connection open T, then close it without
                        having said so (no ``Connection: close``), as llama.cpp's server does
                        after each stream; 0 closes at once. A request sent on it meanwhile is
                        never answered
``stall=T``             stop writing for T after ``stall-after-events=K`` events (default 1)
``stall-heartbeat=S``   during the stall send a ``: ping`` comment every S
``drip=T``              sleep T before every event after the first
``batch=N``             write events in batches of at least N bytes (not a fault: what a fast
                        server or a buffering proxy does; for client CPU benchmarks). Ignored
                        with ``drip`` and the drop/stall/oversize faults, which need per-event
                        writes
``oversize=N``          one extra event whose data is N bytes (a chunk with empty choices and
                        a padding field; it has no ``id:``), after ``oversize-after-events=K``
                        events (default 1)
``status=C``            answer HTTP status C (200 to 599; a 1xx cannot end a request, and 204,
                        205 and 304 are sent without content) instead of the stream, with
                        ``status-body=json``
                        (OpenAI-style error object, the default) or ``status-body=html``
                        (on ``/v1/messages`` the body is Anthropic's ``{"type": "error",
                        "error": {...}}``; ``status=529`` is its ``overloaded_error``)
``retry-after=V``       add ``Retry-After: V`` to that error response
``retry-after-ms=V``    add ``retry-after-ms: V`` to it (OpenAI's and Anthropic's own header)
``should-retry=V``      add ``x-should-retry: V`` to it (``true``/``false`` tell the official
                        SDKs whether to retry, whatever the status)
``rate-limit=N``        enforce N requests per ``rate-window=T`` (default 1) on this server
                        (one fixed window for every request with the fault): the requests past
                        N in a window are answered 429 with ``retry-after-ms`` (the time left)
                        and ``x-should-retry: true``; every answer states the limit in
                        ``rate-headers=openai`` (``x-ratelimit-*``, the default) or
                        ``anthropic`` (``anthropic-ratelimit-*``, and ``request-id``) headers
``fail-first=N``        apply this request's faults only to the first N attempts that share an
                        ``X-Fluxstream-Attempt-Key`` (or, without that header, the same method,
                        path and body); later attempts are served cleanly. Alone, it means
                        ``status=503``. A retry whose body changes (a continuation request with
                        an assistant prefix) counts only through the attempt key.
``delay=T``             wait T before sending the response headers (time to first byte)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

__all__ = ["FAULT_KEYS", "FaultError", "Faults", "build_faults", "parse_fault_spec"]

MAX_SECONDS = 300.0
MAX_BYTES = 256 * 1024 * 1024


class FaultError(ValueError):
    """A fault specification could not be parsed (the server answers 400 with this message)."""


@dataclass(frozen=True)
class Faults:
    """Parsed faults for one response; the defaults mean "behave"."""

    write_size: int | None = None
    write_pause: float = 0.0
    drop_after: int | None = None
    drop_after_events: int | None = None
    bad_chunk_after: int | None = None
    drop_reset: bool = False
    close_after: float | None = None
    stall: float = 0.0
    stall_after_events: int = 1
    stall_heartbeat: float | None = None
    drip: float = 0.0
    batch: int | None = None
    oversize: int | None = None
    oversize_after_events: int = 1
    status: int | None = None
    status_body: Literal["json", "html"] = "json"
    retry_after: str | None = None
    retry_after_ms: str | None = None
    should_retry: str | None = None
    rate_limit: int | None = None
    rate_window: float = 1.0
    rate_headers: Literal["openai", "anthropic"] = "openai"
    fail_first: int | None = None
    delay: float = 0.0

    @property
    def any(self) -> bool:
        """Whether any fault is set at all."""
        return self != Faults()

    def cleared(self) -> Faults:
        """No faults (what an attempt past ``fail-first`` gets)."""
        return Faults()


_INT = {
    "write-size": (1, MAX_BYTES),
    "drop-after": (0, MAX_BYTES),
    "drop-after-events": (0, 10_000_000),
    "bad-chunk-after": (0, MAX_BYTES),
    "stall-after-events": (0, 10_000_000),
    "oversize": (1, MAX_BYTES),
    "oversize-after-events": (0, 10_000_000),
    "status": (200, 599),
    "fail-first": (0, 1_000_000),
    "batch": (1, MAX_BYTES),
    "rate-limit": (0, 1_000_000),
}
_FLOAT = {
    "write-pause": (0.0, 10.0),
    "stall": (0.0, MAX_SECONDS),
    "stall-heartbeat": (0.001, MAX_SECONDS),
    "drip": (0.0, 60.0),
    "delay": (0.0, MAX_SECONDS),
    "close-after": (0.0, MAX_SECONDS),
    "rate-window": (0.001, MAX_SECONDS),
}
#: What a refused value of these keys is told, beyond its bounds.
_WHY = {
    "status": (
        ": a status fault is the final answer, 200 to 599 (a 1xx is informational: it cannot"
        " end a request)"
    ),
}
_OTHER = ("drop-reset", "status-body", "retry-after", "retry-after-ms", "should-retry",
          "rate-headers")
#: Every accepted key.
FAULT_KEYS: tuple[str, ...] = (*_INT, *_FLOAT, *_OTHER)
#: Each numeric key's type and bounds.
_NUMBERS: dict[str, tuple[type[int] | type[float], float, float]] = {
    **{key: (int, lo, hi) for key, (lo, hi) in _INT.items()},
    **{key: (float, lo, hi) for key, (lo, hi) in _FLOAT.items()},
}


def parse_fault_spec(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """``"a=1,b=2"`` -> ``{"a": "1", "b": "2"}`` with the keys checked (values later)."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = [(str(k), str(v)) for k, v in spec.items()]
    else:
        items = []
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise FaultError(f"fault {part!r} must look like key=value")
            items.append((key.strip(), value.strip()))
    out: dict[str, str] = {}
    for key, value in items:
        key = key.lower().replace("_", "-")
        if key not in FAULT_KEYS:
            raise FaultError(f"unknown fault {key!r} (known: {', '.join(FAULT_KEYS)})")
        out[key] = value
    return out


def build_faults(spec: Mapping[str, str]) -> Faults:
    """Validate the values of a parsed spec and build :class:`Faults`."""
    kwargs: dict[str, object] = {}
    for key, value in spec.items():
        attr = key.replace("-", "_")
        try:
            if key in _NUMBERS:
                kind, lo, hi = _NUMBERS[key]
                number = kind(value)
                if not lo <= number <= hi:
                    raise ValueError
                kwargs[attr] = number
            elif key == "drop-reset":
                kwargs[attr] = value.lower() in ("1", "true", "yes", "on")
            elif key == "status-body":
                if value not in ("json", "html"):
                    raise ValueError
                kwargs[attr] = value
            elif key == "rate-headers":
                if value not in ("openai", "anthropic"):
                    raise ValueError
                kwargs[attr] = value
            else:
                kwargs[attr] = value
        except ValueError:
            why = _WHY.get(key, "")
            raise FaultError(f"bad value {value!r} for fault {key!r}{why}") from None
    if (
        "fail_first" in kwargs
        and "status" not in kwargs
        and not (
            {"drop_after", "drop_after_events", "bad_chunk_after", "stall", "drip", "oversize",
             "delay", "close_after"} & set(kwargs)
        )
    ):
        kwargs["status"] = 503
    assert {f.name for f in fields(Faults)} >= set(kwargs)
    return Faults(**kwargs)  # type: ignore[arg-type]
