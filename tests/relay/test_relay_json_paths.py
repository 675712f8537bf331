"""A stream with path events, recorded: the log stores the deltas and never the path events
(a view of them), and a follower that wants paths gets the producer's by running
``structured.PathTracker`` over what it reads. Both logs (memory, real Redis)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from json_path_oracle import expected, normalized
from relay_support import follow_all

import fluxstream
from fluxstream import PathDelta, PathDone, PathStart
from fluxstream.relay import ReplyLog
from fluxstream.server import ServerThread
from fluxstream.structured import PathTracker

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]
PATHS = (PathStart, PathDelta, PathDone)
TOOLS = [{"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                                     "mode": {"type": "integer"}}}}}]


async def test_the_log_skips_path_events_and_a_follower_derives_the_same(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    log = make_log()
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(model="m", messages=[{"role": "user", "content": "go"}],
                                    tools=TOOLS, content_key="paths", json_paths=True)
        async with log.record(stream) as recorded:
            shown = [event async for event in recorded]
    arguments = recorded.reply.choices[0].tool_calls[0].arguments
    mine = normalized([e for e in shown if isinstance(e, PATHS)])
    assert mine == expected(json.loads(arguments))

    followed = [item.event for item in (await follow_all(log, "paths")).events]
    assert not any(isinstance(e, PATHS) for e in followed)
    deltas = [e for e in followed if isinstance(e, fluxstream.ToolCallDelta)]
    assert "".join(d.arguments for d in deltas) == arguments
    tracker = PathTracker()
    derived: list[Any] = []
    for event in followed:
        derived += tracker.feed([event])
    assert normalized([e for e in derived if isinstance(e, PATHS)]) == mine
