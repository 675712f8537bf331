"""A client's settings are read once per stream, when it is made: the settings in force then.

Every assignable setting of :class:`~fluxstream.AsyncClient` (``retry``, ``resume``,
``raise_for_outcome``, ``observers``, ``fallbacks``, ``failover``, ``max_event_bytes``,
``require_finish_reason``, ``stream_limits``, ``timeouts``, ``base_url``) applies to the
streams made after it is assigned, never to one made before (whose attempts, retries and
resumes keep what it was made with), and an assigned value is checked as the constructor
checks it: a refused one changes nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest
from sse_frames import chat_choice, chat_frame

import fluxstream
from fluxstream import Failover, ResumePolicy, RetryPolicy, StreamLimits, Timeouts, Upstream
from fluxstream.errors import StreamTruncatedError

# An httpx MockTransport answers the client each test injects; the settings are the
# client's, whatever the event loop.
pytestmark = [pytest.mark.anyio, pytest.mark.asyncio_only]

MSG = [{"role": "user", "content": "hi"}]
HEAD = {"content-type": "text/event-stream"}


def chunk(text: str, finish: str | None = None, *, index: int = 0) -> bytes:
    return chat_frame(chat_choice(text, finish=finish, index=index, with_finish=True))


DONE = chunk("ok", "stop") + b"data: [DONE]\n\n"


class Upstreams:
    """Answers by host: each host's answers in turn (the last one again once they run out);
    every request kept."""

    def __init__(self, **answers: list[tuple[int, bytes]]) -> None:
        self.answers = answers
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        host = request.url.host.replace(".test", "")
        queue = self.answers[host]
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        return httpx.Response(status, content=body, headers=HEAD if status == 200 else {})

    def hosts(self) -> list[str]:
        return [r.url.host.replace(".test", "") for r in self.seen]


def make_client(upstreams: Upstreams, **kwargs: Any) -> fluxstream.AsyncClient:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=1))
    http = httpx.AsyncClient(transport=httpx.MockTransport(upstreams))
    return fluxstream.AsyncClient("http://primary.test/v1", "k", http_client=http, **kwargs)


async def drain(stream: fluxstream.ReplyStream) -> fluxstream.Reply:
    async with stream:
        async for _ in stream:
            pass
    return stream.reply


async def outcome_of(stream: fluxstream.ReplyStream) -> str:
    """How ``stream`` ended (a failed stream raises from its iteration: caught here)."""
    with contextlib.suppress(fluxstream.StreamFailedError):
        await drain(stream)
    outcome = stream.reply.outcome
    assert outcome is not None
    return outcome.value


async def test_retry_assigned_applies_to_the_next_stream_only() -> None:
    up = Upstreams(primary=[(503, b""), (200, DONE)])
    client = make_client(up, retry=RetryPolicy.off())
    before = client.chat.stream(model="m", messages=MSG)
    client.retry = RetryPolicy(max_attempts=2, base_delay=0, max_delay=0)
    with pytest.raises(fluxstream.APIStatusError):
        await drain(before)
    up.answers["primary"] = [(503, b""), (200, DONE)]
    assert (await drain(client.chat.stream(model="m", messages=MSG))).outcome == "done"
    assert len(up.seen) == 3


async def test_resume_assigned_applies_to_the_next_stream_only() -> None:
    cut = chunk("part one ")  # content, then the body ends: no finish, no [DONE]
    up = Upstreams(primary=[(200, cut), (200, DONE)])
    client = make_client(up, resume=ResumePolicy.off())
    before = client.chat.stream(model="m", messages=MSG)
    client.resume = ResumePolicy(last_event_id=False, restart=True, max_resumes=1)
    assert (await drain(before)).outcome == "truncated"
    assert len(up.seen) == 1
    up.answers["primary"] = [(200, cut), (200, DONE)]
    assert (await drain(client.chat.stream(model="m", messages=MSG))).outcome == "done"
    assert len(up.seen) == 3


async def test_raise_for_outcome_assigned_applies_to_the_next_stream_only() -> None:
    up = Upstreams(primary=[(200, chunk("cut "))])
    client = make_client(up, resume=ResumePolicy.off())
    before = client.chat.stream(model="m", messages=MSG)
    client.raise_for_outcome = True
    assert (await drain(before)).outcome == "truncated"  # quietly, as it was made
    with pytest.raises(StreamTruncatedError):
        await drain(client.chat.stream(model="m", messages=MSG))
    client.raise_for_outcome = False
    assert (await drain(client.chat.stream(model="m", messages=MSG))).outcome == "truncated"


class Seen:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def on_open(self, info: fluxstream.StreamInfo) -> None:
        self.opened.append(info.content_key)

    def on_event(self, event: fluxstream.Event) -> None:
        pass

    def on_end(self, reply: fluxstream.Reply, stats: Any) -> None:
        pass


async def test_observers_assigned_see_the_next_streams_only() -> None:
    up = Upstreams(primary=[(200, DONE)])
    first, second = Seen(), Seen()
    client = make_client(up, observers=[first])
    before = client.chat.stream(model="m", messages=MSG, content_key="before")
    client.observers = [*client.observers, second]
    assert client.observers == (first, second)
    await drain(before)
    await drain(client.chat.stream(model="m", messages=MSG, content_key="after"))
    assert first.opened == ["before", "after"] and second.opened == ["after"]


async def test_fallbacks_and_failover_assigned_apply_to_the_next_stream_only() -> None:
    up = Upstreams(primary=[(503, b"")], backup=[(200, DONE)])
    client = make_client(up)
    before = client.chat.stream(model="m", messages=MSG)
    client.fallbacks = [Upstream("http://backup.test/v1")]
    client.failover = Failover(per_upstream_attempts=1)
    with pytest.raises(fluxstream.APIStatusError):
        await drain(before)
    assert (await drain(client.chat.stream(model="m", messages=MSG))).outcome == "done"
    assert up.hosts() == ["primary", "primary", "backup"]
    client.fallbacks = ()
    with pytest.raises(fluxstream.APIStatusError):
        await drain(client.chat.stream(model="m", messages=MSG))


@pytest.mark.parametrize(
    ("attribute", "value", "error", "message"),
    [
        ("fallbacks", ["http://backup.test/v1"], TypeError, "fallbacks holds fluxstream.Upstream"),
        ("fallbacks", [Upstream("http://primary.test/v1")], ValueError, "label of the client"),
        ("failover", {"per_upstream_attempts": 1}, TypeError, "failover is a Failover"),
        ("raise_for_outcome", 1, TypeError, "raise_for_outcome is True or False"),
        ("timeouts", 5.0, TypeError, "timeouts must be a Timeouts"),
    ],
)
def test_an_assigned_setting_is_checked_like_the_constructors(
    attribute: str, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        fluxstream.AsyncClient("http://primary.test/v1", "k", **{attribute: value})
    client = fluxstream.AsyncClient("http://primary.test/v1", "k")
    before = getattr(client, attribute)
    with pytest.raises(error, match=message):
        setattr(client, attribute, value)
    assert getattr(client, attribute) == before  # a refused value changes nothing


@pytest.mark.parametrize(
    ("attribute", "old", "new", "body", "outcomes"),
    [
        pytest.param("max_event_bytes", 1 << 20, 64, DONE, ("done", "failed"), id="event-bytes"),
        pytest.param("require_finish_reason", True, False,
                     chunk("no finish ") + b"data: [DONE]\n\n", ("truncated", "done"),
                     id="finish-reason"),
        pytest.param("stream_limits", None, StreamLimits(max_choices=1),
                     chunk("a", index=0) + chunk("b", index=1) + DONE, ("done", "failed"),
                     id="limits"),
    ],
)
async def test_parser_settings_assigned_apply_to_the_next_stream_only(
    attribute: str, old: Any, new: Any, body: bytes, outcomes: tuple[str, str]
) -> None:
    up = Upstreams(primary=[(200, body)])
    client = make_client(up, resume=ResumePolicy.off(), **{attribute: old})
    before = client.chat.stream(model="m", messages=MSG)
    setattr(client, attribute, new)
    assert getattr(client, attribute) == new
    assert await outcome_of(before) == outcomes[0]
    assert await outcome_of(client.chat.stream(model="m", messages=MSG)) == outcomes[1]


async def test_timeouts_assigned_apply_to_the_next_stream_only() -> None:
    up = Upstreams(primary=[(200, DONE)])
    client = make_client(up)
    before = client.chat.stream(model="m", messages=MSG)
    client.timeouts = Timeouts(connect=3.0, read=30.0, write=3.0, pool=3.0)
    await drain(before)
    await drain(client.chat.stream(model="m", messages=MSG))
    first, second = (r.extensions["timeout"] for r in up.seen)
    assert (first["connect"], first["read"]) == (5.0, 5.0)  # the injected client's own
    assert (second["connect"], second["read"]) == (3.0, 30.0)
