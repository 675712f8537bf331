"""One Redis: a frame's script names the streams it appended to on the log's "written"
channel, and a follower process's tailer reads just those without blocking
(``fluxstream/relay/_redis_written_channel.py``). The stream stays the only record: a lost,
foreign or malformed message, a writer that never publishes, a subscription killed
mid-reply -- every follower still gets every entry once, in order, within a bound."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from relay_support import RedisServer

from fluxstream._events import End, Outcome, TextDelta
from fluxstream.relay import RedisReplyLog
from fluxstream.relay._redis_written_channel import message_of, names_of
from fluxstream.relay.codec import Entry, encode_entry
from fluxstream.relay.writer import Write

pytestmark = pytest.mark.anyio

END = {"outcome": "done", "reason": None, "reply": None, "token": None}

#: Seconds within which an entry reaches the followers by the way a test is about. Every
#: slower way is put off for a minute where a test is about a faster one (:func:`no_own_poll`,
#: :func:`no_safety_read`), so arriving at all within this tells the ways apart, however late
#: a loaded machine runs: no clock is read (a bound of 0.8 s against a one-second poll
#: measured the scheduler whenever a worker stalled).
ARRIVES_WITHIN = 20.0
#: What the slower ways are put off to: well past :data:`ARRIVES_WITHIN`.
PUT_OFF = 60.0
#: The followers' logs' lease: a follower's own poll is at most a quarter of it.
FOLLOWER_LEASE = 4 * PUT_OFF


@pytest.fixture
def no_safety_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tailer's read of every watched stream, due a quarter second after the last one,
    put off for a minute: an entry then arrives by its message or not within
    :data:`ARRIVES_WITHIN`."""
    from fluxstream.relay import _redis_tailer

    monkeypatch.setattr(_redis_tailer, "_QUIET", PUT_OFF)


@pytest.fixture
def no_own_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting follower's own read of its reply (a second apart, at most) put off for a
    minute (with :data:`FOLLOWER_LEASE`): an entry then arrives by the tailer or not within
    :data:`ARRIVES_WITHIN`."""
    from fluxstream.relay import log

    monkeypatch.setattr(log, "_FOLLOW_POLL", PUT_OFF)


@pytest.fixture(scope="module")
def redis_alone() -> Iterator[RedisServer]:
    """A Redis of this module's own: its blocked clients are this module's tailers only."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


def text(number: int) -> Entry:
    return Entry(number, (TextDelta("text", 0, number - 1, f"{number}"),))


def final(number: int) -> Entry:
    return Entry(number, (End(Outcome.DONE, None),), END)


class Followers:
    """``count`` followers of ``key`` on their own log (another process's tailer), each
    keeping (entry text, arrival time)."""

    def __init__(self, log: RedisReplyLog, key: str, count: int) -> None:
        self.log, self.key = log, key
        self.got: list[list[tuple[str, float]]] = [[] for _ in range(count)]
        self.ended = [False] * count

    def start(self, tg: Any) -> None:
        """Every follower, as a task of ``tg``."""
        for at in range(len(self.got)):
            tg.start_soon(self.follow, at)

    async def follow(self, at: int) -> None:
        async for item in self.log.follow(self.key):
            if isinstance(item.event, TextDelta):
                self.got[at].append((item.event.text, time.monotonic()))
            elif isinstance(item.event, End):
                self.ended[at] = True

    async def until(self, count: int, within: float) -> None:
        """Every follower has ``count`` texts, within ``within`` seconds."""
        with anyio.fail_after(within):
            for _ in range(int(within / 0.005) + 1):  # the deadline ends it first
                if all(len(got) >= count for got in self.got):
                    return
                await anyio.sleep(0.005)


async def blocked_clients(redis: Any) -> int:
    return int((await redis.info("clients"))["blocked_clients"])


async def no_blocked_read_within(
    redis: Any, within: float, channel: str = "written:written"
) -> None:
    """The followers' tailer subscribed, and nothing blocks in Redis."""
    with anyio.fail_after(within):
        for _ in range(int(within / 0.02) + 1):  # the deadline ends it first
            if (await redis.pubsub_numsub(channel))[0][1]:
                break
            await anyio.sleep(0.02)
        for _ in range(int(within / 0.02) + 1):
            if not await blocked_clients(redis):
                return
            await anyio.sleep(0.02)
    raise AssertionError("a read stayed blocked")


@pytest.fixture
async def logs(redis_alone: RedisServer) -> AsyncIterator[tuple[RedisReplyLog, RedisReplyLog]]:
    producer = RedisReplyLog(redis_alone.url, prefix="written:")
    follower = RedisReplyLog(redis_alone.url, prefix="written:", lease=FOLLOWER_LEASE)
    try:
        yield producer, follower
    finally:
        await follower.aclose()
        await producer.aclose()


async def write(log: RedisReplyLog, key: str, *entries: Entry) -> None:
    results = await log._write_many([
        Write(key, "me", entry, None, entry.end is not None) for entry in entries
    ])
    assert results == [False] * len(entries)


async def test_waiting_followers_keep_no_blocking_read_and_get_each_entry_at_once(
    logs: tuple[RedisReplyLog, RedisReplyLog], no_safety_read: None, no_own_poll: None,
) -> None:
    """With the subscription live, nothing blocks in Redis while the followers wait (a
    blocking read over every watched stream woke Redis at every frame: register on every
    key, unregister, read again), and each entry reaches every follower at once, not at the
    next read of every watched stream."""
    producer, follower = logs
    await producer._create("k", "me", {})
    followers = Followers(follower, "k", 3)
    async with anyio.create_task_group() as tg:
        followers.start(tg)
        await no_blocked_read_within(producer.redis, 3.0)
        for number in range(1, 11):
            await write(producer, "k", text(number))
            await followers.until(number, ARRIVES_WITHIN)  # by its message: nothing else is due
            assert await blocked_clients(producer.redis) == 0
        await write(producer, "k", final(11))
    assert followers.ended == [True] * 3
    assert [[t for t, _ in got] for got in followers.got] == [[str(n) for n in range(1, 11)]] * 3


async def test_more_entries_than_one_read_takes_arrive_without_waiting_for_the_safety_read(
    logs: tuple[RedisReplyLog, RedisReplyLog], no_safety_read: None, no_own_poll: None,
) -> None:
    """A frame with twenty entries of one stream (a read takes eight): the stream is read
    again at once, not at the next message or the safety read."""
    producer, follower = logs
    await producer._create("burst", "me", {})
    followers = Followers(follower, "burst", 2)
    async with anyio.create_task_group() as tg:
        followers.start(tg)
        await no_blocked_read_within(producer.redis, 3.0)
        await write(producer, "burst", text(1))
        await followers.until(1, 5.0)
        await write(producer, "burst", *[text(n) for n in range(2, 22)])
        await followers.until(21, ARRIVES_WITHIN)  # one message: the rest read at once
        await write(producer, "burst", final(22))
    assert [[t for t, _ in got] for got in followers.got] == [[str(n) for n in range(1, 22)]] * 2


@pytest.mark.parametrize("prefix", ["with:colon:", "new\nline:", "12:34:", "é ü:"])
async def test_any_stream_name_is_named_exactly(
    redis_alone: RedisServer, prefix: str, no_safety_read: None, no_own_poll: None
) -> None:
    """Stream names with a colon, a newline, digits before a colon or non-ASCII (the prefix
    is the caller's; a key with such characters is hashed into the name) reach the tailer
    as written: each entry arrives at once, not at the next read of every watched stream."""
    producer = RedisReplyLog(redis_alone.url, prefix=prefix)
    follower = RedisReplyLog(redis_alone.url, prefix=prefix, lease=FOLLOWER_LEASE)
    try:
        await producer._create("k", "me", {})
        followers = Followers(follower, "k", 1)
        async with anyio.create_task_group() as tg:
            followers.start(tg)
            await no_blocked_read_within(producer.redis, 3.0, channel=prefix + "written")
            for number in (1, 2, 3):
                await write(producer, "k", text(number))
                await followers.until(number, ARRIVES_WITHIN)  # by its message, named exactly
            await write(producer, "k", final(4))
        assert [t for t, _ in followers.got[0]] == ["1", "2", "3"]
    finally:
        await follower.aclose()
        await producer.aclose()


async def test_a_foreign_or_malformed_message_and_a_silent_writer_lose_nothing(
    logs: tuple[RedisReplyLog, RedisReplyLog], no_own_poll: None,
) -> None:
    """Garbage on the channel only makes the tailer read what it watches; an entry appended
    without a message (a writer that does not publish) arrives by the next read of every
    watched stream, within a quarter second, even while messages keep coming for others."""
    producer, follower = logs
    await producer._create("quiet", "me", {})
    k = producer.keys("quiet")
    followers = Followers(follower, "quiet", 2)
    async with anyio.create_task_group() as tg:
        followers.start(tg)
        await no_blocked_read_within(producer.redis, 3.0)
        for garbage in (b"x", b"99:short", b"-1:", b"\xff\xfe", b"3:abc"):
            await producer.redis.publish("written:written", garbage)
        await write(producer, "quiet", text(1))
        await followers.until(1, 5.0)

        async def busy() -> None:  # another producer's frames, every 20 ms
            for _ in range(200):
                await producer.redis.publish("written:written", b"9:elsewhere")
                await anyio.sleep(0.02)

        async with anyio.create_task_group() as others:
            others.start_soon(busy)
            await anyio.sleep(0.3)
            await producer.redis.xadd(
                k["stream"], {"d": encode_entry([TextDelta("text", 0, 1, "2")])}, id="2-0"
            )
            # By the read of every watched stream (a quarter second): the follower's own poll
            # is put off.
            await followers.until(2, ARRIVES_WITHIN)
            others.cancel_scope.cancel()
        await write(producer, "quiet", text(3), final(4))
    assert [[t for t, _ in got] for got in followers.got] == [["1", "2", "3"]] * 2


async def test_a_killed_subscription_loses_and_repeats_nothing(
    logs: tuple[RedisReplyLog, RedisReplyLog],
) -> None:
    """The subscription's connection is killed mid-reply, twice: the tailer reads as before
    until it is subscribed again, then stops blocking again; every entry arrives once."""
    producer, follower = logs
    await producer._create("killed", "me", {})
    followers = Followers(follower, "killed", 2)
    number = 0
    async with anyio.create_task_group() as tg:
        followers.start(tg)
        for _ in range(2):
            await no_blocked_read_within(producer.redis, 5.0)
            for _ in range(5):
                number += 1
                await write(producer, "killed", text(number))
                await followers.until(number, 5.0)
            assert await producer.redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
            for _ in range(5):  # while the listener is down or subscribing again
                number += 1
                await write(producer, "killed", text(number))
                await followers.until(number, 5.0)
        await write(producer, "killed", final(number + 1))
    expected = [str(n) for n in range(1, number + 1)]
    assert [[t for t, _ in got] for got in followers.got] == [expected] * 2


def test_names_are_read_back_exactly_and_a_malformed_message_is_refused() -> None:
    names = ["a", "with:colon", "new\nline", "é", "", "x" * 300]
    data = b"".join(b"%d:%s" % (len(n.encode()), n.encode()) for n in names)
    assert message_of(names) == data  # what the frame's script publishes
    assert names_of(data) == names
    assert names_of(b"") == []
    for bad in (b"x", b"5:abc", b"3", b":abc", b"-1:a", b"2:\xff\xfe"):
        with pytest.raises((ValueError, UnicodeDecodeError)):
            names_of(bad)


async def test_a_user_refused_the_channel_still_records_and_follows(
    redis_alone: RedisServer, no_own_poll: None,
) -> None:
    """A Redis user with every key but no pub/sub channel (``resetchannels``, the default for
    new ACL users since Redis 7): the frame's script cannot publish and the follower cannot
    subscribe, yet every write succeeds and every entry arrives (the blocking read)."""
    from redis.asyncio import Redis

    admin = Redis.from_url(redis_alone.url)
    await admin.execute_command(
        "ACL", "SETUSER", "nochannels", "on", ">secret", "~*", "resetchannels", "+@all")
    url = f"redis://nochannels:secret@127.0.0.1:{redis_alone.port}/0"
    producer = RedisReplyLog(url, prefix="acl:")
    follower = RedisReplyLog(url, prefix="acl:", lease=FOLLOWER_LEASE)
    try:
        await producer._create("k", "me", {})
        followers = Followers(follower, "k", 2)
        async with anyio.create_task_group() as tg:
            followers.start(tg)
            for number in (1, 2, 3):
                await write(producer, "k", text(number))
                await followers.until(number, ARRIVES_WITHIN)  # the follower's poll is put off
            await write(producer, "k", final(4))
        assert followers.ended == [True, True]
        assert [[t for t, _ in got] for got in followers.got] == [["1", "2", "3"]] * 2
    finally:
        await follower.aclose()
        await producer.aclose()
        await admin.execute_command("ACL", "DELUSER", "nochannels")
        await admin.aclose()


async def test_a_silent_subscription_is_given_up_and_made_again(
    logs: tuple[RedisReplyLog, RedisReplyLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscription that stops answering (Redis paused here; a half-open connection behind
    a NAT in life) is asked a PING, given up when no answer comes, and made again: the
    followers read as before meanwhile and lose nothing."""
    from fluxstream.relay import _redis_written_channel

    monkeypatch.setattr(_redis_written_channel, "_IDLE", 0.2)  # before the listener's first read
    producer, follower = logs
    await producer._create("silent", "me", {})
    followers = Followers(follower, "silent", 2)

    async def subscriber_ids() -> set[int]:
        listed = await producer.redis.execute_command("CLIENT", "LIST", "TYPE", "pubsub")
        text = listed.decode() if isinstance(listed, bytes) else str(listed)
        return {int(part[3:]) for part in text.split() if part.startswith("id=")}

    async with anyio.create_task_group() as tg:
        followers.start(tg)
        await no_blocked_read_within(producer.redis, 3.0)
        await write(producer, "silent", text(1))
        await followers.until(1, 5.0)
        before = await subscriber_ids()
        await producer.redis.execute_command("CLIENT", "PAUSE", 1200, "ALL")
        await anyio.sleep(1.3)
        await write(producer, "silent", text(2))
        await followers.until(2, 5.0)
        with anyio.fail_after(5.0):
            for _ in range(250):  # the deadline ends it first
                after = await subscriber_ids()
                if after and not after & before:
                    break
                await anyio.sleep(0.02)
        await no_blocked_read_within(producer.redis, 5.0)
        await write(producer, "silent", text(3), final(4))
    assert [[t for t, _ in got] for got in followers.got] == [["1", "2", "3"]] * 2


async def test_a_frame_publishes_the_streams_it_appended_to_once(
    logs: tuple[RedisReplyLog, RedisReplyLog],
) -> None:
    """One frame's writes to two replies (and a lease refresh, which appends nothing): one
    message, naming the two streams in order, as :func:`message_of` writes them."""
    producer, _ = logs
    for key in ("one", "two:é", "idle"):
        await producer._create(key, "me", {})
    pubsub = producer.redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe("written:written")
    try:
        results = await producer._write_many([
            Write("one", "me", text(1)), Write("idle", "me"), Write("two:é", "me", text(1)),
        ])
        assert results == [False] * 3
        with anyio.fail_after(5.0):
            message = None
            for _ in range(100):  # the deadline ends it first
                message = await pubsub.get_message(timeout=0.05)
                if message is not None:
                    break
        assert message is not None
        streams = [producer.keys(key)["stream"] for key in ("one", "two:é")]
        assert message["data"] == message_of(streams)
        assert await pubsub.get_message(timeout=0.2) is None  # once per frame
    finally:
        await pubsub.aclose()


@pytest.mark.skipif(
    not hasattr(asyncio.Task, "cancelling"), reason="Python 3.10: no count of cancel requests"
)
async def test_a_cancel_that_arrives_as_the_connect_fails_still_ends_the_subscription(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The subscription's task is cancelled (an event loop shutting down with the log never
    closed) at the moment its connect fails (Redis gone: refused at once). Python 3.11's
    ``asyncio.wait_for`` then returns the connect's outcome -- its error -- and the cancel is
    lost; the listener took the error for one more failed attempt and retried forever, so
    ``asyncio.run`` never returned (a relay test hung at its event loop's end). A cancel
    asked of the task is honoured at the next failure."""
    from fluxstream.relay._redis_written_channel import WrittenNames

    listener: list[asyncio.Task[Any]] = []
    connects = 0

    class Refused:
        """A connection to a Redis that is gone, cancelled as it is refused (the first time)."""

        async def connect(self) -> None:
            nonlocal connects
            connects += 1
            if connects == 1:
                listener[0].cancel()  # the loop's end cancels the listener ...
            raise ConnectionError("refused")  # ... as the connect fails

        async def disconnect(self) -> None:
            pass

    written = WrittenNames(None, "written:written")
    monkeypatch.setattr(written, "_connection", Refused)
    written.start()
    assert written._task is not None
    task = written._task
    listener.append(task)
    try:
        with anyio.move_on_after(3):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        assert task.cancelled(), f"still running after {connects} connects"
    finally:
        written.stop()  # no longer its task: a listener that lost the cancel ends after a retry
        with anyio.move_on_after(40), contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
