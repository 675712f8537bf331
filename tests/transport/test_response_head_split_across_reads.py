"""The default transport finds a response head's end when it is split across socket reads.

fluxstream's aiohttp adapter feeds the response head to aiohttp's parser apart from the body,
and bounds the head's size (100 KiB, as httpx does). A head whose blank line is split over
two reads (``...\\r\\n\\r`` then ``\\n`` + body: a server or proxy writing in small pieces,
TCP segmentation) must still end there: the body bytes in the second read are not head
bytes, and a large body behind such a head is not "a response head larger than 100 KiB".

Deterministic: the protocol object is fed exactly those reads, no socket in between (the
read boundaries are what matters, and a socket would not keep them).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fluxstream._io.aiohttp_private import HEAD_LIMIT, SESSION_HEAD_LIMITS, Handler

BODY = json.dumps({"text": "a" * (2 * HEAD_LIMIT)}).encode()  # no blank line in it
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    % len(BODY)
)
LF_HEAD = HEAD.replace(b"\r\n", b"\n")


class _Transport(asyncio.Transport):
    """Just enough of a socket transport for the protocol: nothing is sent or read."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def write(self, data: Any) -> None:
        pass


async def _read_response(reads: list[bytes]) -> tuple[int, bytes]:
    handler = Handler(loop=asyncio.get_running_loop())
    handler.connection_made(_Transport())
    handler.set_response_params(**SESSION_HEAD_LIMITS)  # as the adapter's session sets them
    for data in reads:
        handler.data_received(data)
    message, payload = await asyncio.wait_for(handler.read(), 5)
    return message.code, await asyncio.wait_for(payload.read(), 5)


@pytest.mark.parametrize(
    ("head", "back"),
    [(HEAD, 1), (HEAD, 2), (HEAD, 3), (LF_HEAD, 1)],
    ids=["crlf-1", "crlf-2", "crlf-3", "lf-1"],  # bytes of the blank line in the second read
)
def test_a_head_end_split_across_reads_is_found_with_a_large_body_behind_it(
    head: bytes, back: int
) -> None:
    reads = [head[:-back], head[-back:] + BODY]
    assert asyncio.run(_read_response(reads)) == (200, BODY)


def test_a_head_over_the_limit_is_still_refused_when_it_comes_in_pieces() -> None:
    """The bound is kept: a head that really is over 100 KiB fails, whatever its reads."""
    line = b"x-big: " + b"b" * 1000 + b"\r\n"
    big = b"HTTP/1.1 200 OK\r\n" + line * (HEAD_LIMIT // len(line) + 1)
    reads = [big[i : i + 4096] for i in range(0, len(big), 4096)]
    with pytest.raises(Exception, match="larger than 100 KiB"):
        asyncio.run(_read_response(reads))


def test_the_head_end_is_found_as_the_general_search_finds_it() -> None:
    """The usual head (whole in one read, CRLF lines) is found by one search: at the same
    place as both blank lines searched for across the reads, for every mix of CR, LF and
    other bytes, any tail of earlier reads, and ends near the size limit."""
    import random

    from fluxstream._io.aiohttp_private import head_end, head_end_searched

    rng = random.Random(40)
    pieces = [b"\r", b"\n", b"\r\n", b"a", b"\r\n\r\n", b"\n\n", b"HTTP/1.1 200 OK"]
    tails = [b"", b"\r", b"\n", b"\r\n", b"\r\n\r", b"a\r\n", b"a\n", b"ab"]
    cases = [HEAD + BODY, LF_HEAD + BODY, HEAD, b"", b"a" * HEAD_LIMIT + b"\r\n\r\n",
             b"a" * (HEAD_LIMIT - 4) + b"\r\n\r\n", b"a" * (HEAD_LIMIT - 3) + b"\r\n\r\n",
             b"a\n\nb\r\n\r\n", b"a\r\n\r\nb\n\n", b"a\r\n\n", b"\n\r\n\r\n"]
    cases += [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
              for _ in range(3000)]
    for data in cases:
        for seen in tails:
            assert head_end(seen, data) == head_end_searched(seen, data), (seen, data[:80])
