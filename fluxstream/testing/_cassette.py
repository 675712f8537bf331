"""Cassettes: real traffic recorded once through the kit's upstream, replayed in every run.

A cassette is a JSON file ``{"format": "fluxstream-cassette/1", "interactions": [...]}`` whose
interactions are capture records (:mod:`fluxstream.cli.capture`: ``fluxstream replay`` reads
each one), with the request's method and headers added; a bare capture file (what
``fluxstream capture`` writes) is a cassette of one interaction.

Recording: the test's client talks to the kit's upstream, which passes each request on to the
real server and its response back read by read, keeping every read with its time. Secrets are
redacted before the file is written: request headers that carry keys, tokens or cookies, and
query parameters that do (:data:`~._upstream.SECRET_QUERY_KEYS`); a response keeps only the
headers a replay needs (no cookie). Replaying: the requests must come in the recorded order and
match (method, path, JSON body); one that does not is answered with a 400 that says where it
differs, and the fixture fails the test with the same words. ``pace=True`` sends each read at
its recorded time.

Why not vcrpy: it patches one HTTP library in the test's process, so an SDK on another library,
a subprocess or aiohttp escapes it; a server on 127.0.0.1 serves whatever connects, and its
faults still apply to a replayed response.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import anyio

from ..cli.capture import CAPTURE_FORMAT, Recording, _from_record
from ..server.answers import Answer, Refusal, Relayed, RelayedHead
from ..server.connection import Dropped
from ..server.dialect_table import dialect_of
from ..server.responder import SECRET_HEADERS
from ._upstream import SECRET_QUERY_KEYS, AnswerSource

__all__ = [
    "CASSETTE_FORMAT",
    "REDACTED",
    "Cassette",
    "CassetteError",
    "CassetteRecorder",
    "CassetteReplay",
    "load_cassette",
    "redact_path",
]

#: The ``format`` a cassette file names; another (a newer fluxstream's) is refused.
CASSETTE_FORMAT = "fluxstream-cassette/1"
REDACTED = "<redacted>"
#: Shorter values are not searched for in a whole file (they would match ordinary text).
MIN_SECRET = 6
#: Request headers not passed on to the real server (hop-by-hop, or set by the HTTP client).
_NOT_FORWARDED = frozenset({"host", "content-length", "connection", "transfer-encoding",
                            "accept-encoding", "keep-alive"})


class CassetteError(ValueError):
    """A cassette cannot be used: its path and the reason are in the message."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"cassette {path}: {reason}")
        self.path = Path(path)
        self.reason = reason


def redact_path(path: str) -> str:
    """``path`` with the values of secret query parameters redacted."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = [(k, REDACTED if k.lower() in SECRET_QUERY_KEYS else v)
             for k, v in parse_qsl(query, keep_blank_values=True)]
    return f"{base}?{urlencode(pairs, safe='<>')}"


def _redacted_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: REDACTED if k.lower() in SECRET_HEADERS else v for k, v in headers.items()}


class Cassette:
    """A loaded cassette: its interactions, as capture records."""

    def __init__(self, path: Path, interactions: list[dict[str, Any]]) -> None:
        self.path = path
        self.interactions = interactions

    def save(self, secrets: Iterable[str] = ()) -> None:
        """Write it; each of ``secrets`` (the values the recorder saw in secret headers and
        query keys) is redacted wherever it appears, so none reaches the disk."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        document = {"format": CASSETTE_FORMAT, "interactions": self.interactions}
        text = json.dumps(document, indent=1, ensure_ascii=False)
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= MIN_SECRET:
                text = text.replace(secret, REDACTED)
                text = text.replace(json.dumps(secret)[1:-1], REDACTED)
        self.path.write_text(text + "\n", encoding="utf-8")


def _newer(found: Any, ours: str) -> str | None:
    """The reason a format name is refused (``None``: it is ours)."""
    if found == ours:
        return None
    family = ours.partition("/")[0]
    if isinstance(found, str) and found.startswith(family + "/"):
        return (f"format {found!r} is not one this fluxstream reads ({ours!r}); "
                "it was written by a newer fluxstream, or edited")
    return f"format {found!r} is not a fluxstream cassette ({ours!r})"


def load_cassette(path: Path | str) -> Cassette:
    """Read and check a cassette; a newer or corrupted one is a :class:`CassetteError`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CassetteError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CassetteError(path, f"is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CassetteError(path, "is not a JSON object")
    if document.get("format") == CAPTURE_FORMAT:
        interactions: Any = [document]
    else:
        reason = _newer(document.get("format"), CASSETTE_FORMAT)
        if reason is not None:
            raise CassetteError(path, reason)
        interactions = document.get("interactions")
        if not isinstance(interactions, list):
            raise CassetteError(path, "'interactions' is not a list")
    for i, record in enumerate(interactions, start=1):
        where = f"interaction {i}"
        if not isinstance(record, dict):
            raise CassetteError(path, f"{where} is not a JSON object")
        reason = _newer(record.get("format"), CAPTURE_FORMAT)
        if reason is not None:
            raise CassetteError(path, f"{where}: {reason}")
        try:
            _from_record(record)
        except ValueError as exc:
            raise CassetteError(path, f"{where}: {exc}") from None
        request = record.get("request")
        if not isinstance(request, dict) or not isinstance(request.get("path"), str):
            raise CassetteError(path, f"{where}: no request path")
    return Cassette(path, interactions)


def _difference(recorded: Any, sent: Any, where: str = "") -> str | None:
    """Where two JSON values first differ, in words (``None``: equal)."""
    if isinstance(recorded, dict) and isinstance(sent, dict):
        for key in [*recorded, *(k for k in sent if k not in recorded)]:
            here = f"{where}.{key}" if where else str(key)
            if key not in sent:
                return f"{here!r} is in the cassette, not in the request"
            if key not in recorded:
                return f"{here!r} is in the request, not in the cassette"
            found = _difference(recorded[key], sent[key], here)
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(sent, list):
        for i, (a, b) in enumerate(zip(recorded, sent, strict=False)):
            found = _difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(recorded) != len(sent):
            return (f"{where!r} has {len(recorded)} items in the cassette, "
                    f"{len(sent)} in the request")
        return None
    if recorded != sent:
        return (f"{where or 'the body'!r} is {_short(recorded)} in the cassette, "
                f"{_short(sent)} in the request")
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _same_path(recorded: str, sent: str) -> bool:
    """A capture's path may be relative to the base URL (``chat/completions``)."""
    a, b = recorded.partition("?")[0].strip("/"), sent.strip("/")
    return a == b or b.endswith("/" + a) or a.endswith("/" + b)


class CassetteReplay(AnswerSource):
    """Answers each request with the next recorded response, if the request matches."""

    def __init__(self, cassette: Cassette, *, pace: bool = False) -> None:
        self.cassette = cassette
        self.pace = pace
        self.mismatches: list[str] = []
        self._lock = threading.Lock()

    def answer(self, seq: int, method: str, path: str, query: str,
               headers: tuple[tuple[str, str], ...], body: Any) -> Answer | None:
        problem = self._mismatch(seq, method, path, body)
        if problem is not None:
            with self._lock:
                self.mismatches.append(problem)
            return Refusal(400, problem, code="cassette_mismatch")
        record = self.cassette.interactions[seq - 1]
        return Relayed(lambda: self._open(record))

    def _mismatch(self, seq: int, method: str, path: str, body: Any) -> str | None:
        interactions = self.cassette.interactions
        head = f"fluxstream cassette {self.cassette.path.name}: request {seq} ({method} {path})"
        if seq > len(interactions):
            return f"{head} is one more than the {len(interactions)} it holds"
        request = interactions[seq - 1]["request"]
        recorded_method = request.get("method", "POST")
        if recorded_method != method or not _same_path(request["path"], path):
            return f"{head} does not match the recorded {recorded_method} {request['path']}"
        difference = _difference(request.get("body"), body)
        if difference is not None:
            return f"{head} does not match the recording: {difference}"
        return None

    async def _open(self, record: Mapping[str, Any]) -> RelayedHead:
        capture = _from_record(record)
        times = [float(r.get("t", 0.0)) for r in record["reads"]]
        headers = tuple((k, v) for k, v in capture.headers.items() if k != "x-request-id")
        return capture.status or 200, headers, self._reads(capture.reads, times, capture.error)

    async def _reads(self, reads: list[bytes], times: list[float],
                     error: Mapping[str, str] | None) -> AsyncIterator[bytes]:
        start = anyio.current_time()
        for read, at in zip(reads, times, strict=True):
            if self.pace:
                await anyio.sleep(max(0.0, start + at - anyio.current_time()))
            yield read
        if error is not None:
            raise Dropped  # the recorded connection broke here: so does this one


class CassetteRecorder(AnswerSource):
    """Passes each request on to ``target`` (the real server's origin) and records it."""

    def __init__(self, path: Path, target: str, *, timeout: float = 120.0) -> None:
        self.cassette = Cassette(path, [])
        self.target = target.rstrip("/")
        self.timeout = timeout
        self.secrets: set[str] = set()
        self._lock = threading.Lock()

    def answer(self, seq: int, method: str, path: str, query: str,
               headers: tuple[tuple[str, str], ...], body: Any) -> Answer | None:
        target = f"{path}?{query}" if query else path
        return Relayed(lambda: self._forward(method, target, headers, body))

    async def _forward(self, method: str, target: str,
                       headers: tuple[tuple[str, str], ...], body: Any) -> RelayedHead:
        import httpx  # the recorder's own client: a dependency, imported when recording

        sent = {k: v for k, v in headers if k not in _NOT_FORWARDED}
        self._remember_secrets(sent, target)
        client = httpx.AsyncClient(timeout=self.timeout)
        request = client.build_request(
            method, self.target + target, headers=sent,
            content=None if body is None else json.dumps(body).encode(),
        )
        response = await client.send(request, stream=True)
        recording = Recording(body if isinstance(body, dict) else {},
                              path=redact_path(target), wire_format=dialect_of(target).name)
        recording.request["method"] = method
        recording.request["headers"] = _redacted_headers(sent)
        recording.started(response)
        with self._lock:
            self.cassette.interactions.append(recording.record())
            index = len(self.cassette.interactions) - 1
        kept = recording.record()["headers"]
        head = tuple((k, v) for k, v in kept.items() if k != "x-request-id")
        return response.status_code, head, self._relay(client, response, recording, index)

    async def _relay(self, client: Any, response: Any, recording: Recording,
                     index: int) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                recording.add(chunk)
                yield chunk
        except Exception as exc:  # the real connection broke: recorded, and passed on
            recording.error = {"type": type(exc).__name__, "message": str(exc)}
            raise Dropped from exc
        finally:
            with self._lock:
                self.cassette.interactions[index] = recording.record()
            with anyio.CancelScope(shield=True):
                await response.aclose()
                await client.aclose()

    def _remember_secrets(self, headers: Mapping[str, str], target: str) -> None:
        """The secret values of a request, to be kept off the disk."""
        found = set()
        for name, value in headers.items():
            if name in SECRET_HEADERS:
                found |= {value, value.partition(" ")[2]} if " " in value else {value}
        query = target.partition("?")[2]
        found |= {v for k, v in parse_qsl(query) if k.lower() in SECRET_QUERY_KEYS}
        with self._lock:
            self.secrets |= {value for value in found if value}

    def save(self) -> None:
        """Write the cassette, every secret seen redacted."""
        with self._lock:
            self.cassette.save(self.secrets)
