"""``text(coalesce=)`` yields the text it holds before the error that ends the stream.

Deltas that arrive within one interval are held and joined. When the stream then ended with an
error (``StallTimeoutError`` after heartbeats, ``IdleTimeoutError``, a failed frame) the held
text was dropped: the error came out of the iterator at once, so a renderer showed less than
``error.reply.text`` ("Hel" of "Hello"). The held text is now yielded first, and the error is
raised by the next step.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, MSG, read_request, text, upstream

import fluxstream
from fluxstream import Timeouts
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import IdleTimeoutError, StallTimeoutError, StreamError

pytestmark = pytest.mark.anyio


async def then_pings(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel"))
    await anyio.sleep(0.05)
    await sock.send(text("lo"))
    with anyio.move_on_after(4):
        while True:
            await anyio.sleep(0.05)
            await sock.send(b": ping\n\n")


async def then_silence(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    await sock.send(HEAD + text("Hel"))
    await anyio.sleep(0.05)
    await sock.send(text("lo"))
    await anyio.sleep(4)


@pytest.mark.parametrize(
    ("script", "timeouts", "error"),
    [
        (then_pings, Timeouts(stall=0.3), StallTimeoutError),
        (then_silence, Timeouts(idle=0.3), IdleTimeoutError),
    ],
)
async def test_held_text_is_yielded_before_the_error(
    script: object, timeouts: Timeouts, error: type[StreamError], anyio_backend: str
) -> None:
    pieces: list[str] = []
    async with upstream(script) as up, fluxstream.AsyncClient(  # type: ignore[arg-type]
        up.base, retry=RetryPolicy.off(), resume=ResumePolicy.off(), timeouts=timeouts
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(4), pytest.raises(error) as info:
            async with stream:
                async for piece in stream.text(coalesce=2.0):  # "lo" is held
                    pieces.append(piece)
    assert info.value.reply is not None and info.value.reply.text == "Hello"
    assert "".join(pieces) == "Hello"
    assert pieces[0] == "Hel"  # the first token is never delayed
