"""The warning a retry logs counts retries: the first reads ``retry 1/2`` when the policy
allows three attempts (the first request and two retries). It used to count attempts and
read ``retry 2/3`` for the first retry, which a user watching the CLI took for a lost one."""

from __future__ import annotations

import logging

import pytest

import fluxstream
from fluxstream._retry import RetryPolicy
from fluxstream.server import Server

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "retry me"}]


@pytest.mark.parametrize("attempts", [2, 3, 5])
async def test_each_retry_is_counted_out_of_the_retries_allowed(
    aserver: Server, caplog: pytest.LogCaptureFixture, attempts: int
) -> None:
    failing = attempts - 1  # every retry is used; the last attempt is served
    retry = RetryPolicy(max_attempts=attempts, base_delay=0.0, max_delay=0.0)
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="k",
                                      retry=retry) as client:
        with caplog.at_level(logging.WARNING, logger="fluxstream"):
            reply = await client.chat.complete(
                model="m", messages=MESSAGES,
                extra_headers={"X-Fluxstream-Fault": f"fail-first={failing}"},
            )
    assert reply.outcome == "done"
    lines = [m for m in caplog.messages if "failed before any content" in m]
    assert [line.split("; ")[-1].split(" in ")[0] for line in lines] == [
        f"retry {n}/{attempts - 1}" for n in range(1, attempts)
    ]
