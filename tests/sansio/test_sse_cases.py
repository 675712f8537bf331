"""The 101 framing cases of ``tests/fixtures/sse/cases.json`` against :class:`SSEDecoder`.

Each case is fed in its original reads, as one read, one byte per read and in random splits
(several seeds): the result must not depend on how the bytes were cut. Where a case carries
``expect_eof_flush`` / ``expect_last_event_id_eof_flush`` (the spec discards an event that ends
without a blank line; fluxstream's end of stream acts as one), those are the expectation.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import pytest
from fixture_files import SSE_CASES, require, sse_cases

from fluxstream.sse import ServerSentEvent, SSEDecoder

CASES = sse_cases()
MISSING = f"the SSE framing cases are missing: {SSE_CASES}"
# With the file gone, one placeholder case fails (an empty parameter list would only skip).
CASE_PARAMS = [pytest.param(c, id=c["id"]) for c in CASES] or [pytest.param(None, id="missing")]
SEEDS = range(5)


def chunks_of(case: dict[str, Any] | None) -> list[bytes]:
    if case is None:
        require(SSE_CASES)
        raise AssertionError(MISSING)
    return [base64.b64decode(c) for c in case["chunks_b64"]]


def random_split(data: bytes, seed: int) -> list[bytes]:
    """Cut ``data`` at random places, with empty reads and some tiny and some long reads."""
    rng = random.Random(seed)
    reads: list[bytes] = []
    i = 0
    while i < len(data):
        n = rng.choice([0, 1, 1, 2, 3, 5, 8, 13, 64, rng.randint(1, len(data))])
        reads.append(data[i : i + n])
        i += n
    return reads


def decode(reads: list[bytes]) -> tuple[list[ServerSentEvent], SSEDecoder]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for read in reads:
        events += decoder.feed(read)
    events += decoder.close()
    return events, decoder


def check(case: dict[str, Any], reads: list[bytes]) -> None:
    events, decoder = decode(reads)
    expected = case.get("expect_eof_flush", case["expect"])
    assert [e._asdict() for e in events] == expected
    assert all(type(e) is ServerSentEvent for e in events)
    assert decoder.last_event_id == case.get(
        "expect_last_event_id_eof_flush", case["expect_last_event_id"]
    )
    assert decoder.reconnection_time == case["expect_reconnection_time"]
    assert decoder.bytes_fed == sum(len(r) for r in reads)
    assert not decoder.in_event  # close() flushed everything


def test_fixture_file_has_all_cases() -> None:
    require(SSE_CASES)
    assert len(CASES) == 101
    assert len({c["id"] for c in CASES}) == 101


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_original_reads(case: dict[str, Any]) -> None:
    check(case, chunks_of(case))


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_one_read(case: dict[str, Any]) -> None:
    check(case, [b"".join(chunks_of(case))])


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_one_byte_per_read(case: dict[str, Any]) -> None:
    data = b"".join(chunks_of(case))
    check(case, [data[i : i + 1] for i in range(len(data))])


@pytest.mark.parametrize("case", CASE_PARAMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_random_splits(case: dict[str, Any], seed: int) -> None:
    check(case, random_split(b"".join(chunks_of(case)), seed))


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_eof_flush_cases_report_a_cut_stream(case: dict[str, Any]) -> None:
    """Where end of stream flushed an event the spec would discard, the decoder says so."""
    _, decoder = decode(chunks_of(case))
    if "expect_eof_flush" in case:
        assert decoder.ended_mid_event
    else:
        data = b"".join(chunks_of(case))
        if data.endswith((b"\n\n", b"\r\r", b"\r\n\r\n")):
            assert not decoder.ended_mid_event
            assert not decoder.ended_mid_line
