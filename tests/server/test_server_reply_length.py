"""The embedded server's replies end where a real model's would: a ``max_tokens`` above the
answer's length does not stretch it (it used to, on Chat Completions, by repeating one
paragraph up to the cap, and reported ``stop``: a failover demo printed some thirty copies of
a 150-character answer), and ``length`` is the finish only when the cap cut the answer. Long
streams are asked for by name: the ``fill-max-tokens`` profile."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from fluxstream.server import ServerThread, build_script, expected_reply
from fluxstream.server.script import DEFAULT_DELTAS

PROMPT = [{"role": "user", "content": "rivers"}]


@pytest.fixture(scope="module")
def running() -> Iterator[ServerThread]:
    with ServerThread() as server:
        yield server


def _chat(running: ServerThread, **fields: object) -> dict[str, object]:
    body = {"model": "m", "messages": PROMPT, **fields}
    response = httpx.post(running.base_url + "/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert isinstance(choice, dict)
    return choice


@pytest.mark.parametrize("cap", [DEFAULT_DELTAS, DEFAULT_DELTAS + 1, 200, 4096])
def test_a_cap_above_the_answer_leaves_the_answer_whole(running: ServerThread, cap: int) -> None:
    whole = expected_reply({"model": "m", "messages": PROMPT}).text
    for field in ("max_tokens", "max_completion_tokens"):
        choice = _chat(running, **{field: cap})
        assert choice["message"]["content"] == whole  # type: ignore[index]
        assert choice["finish_reason"] == "stop"
    assert len(build_script({"messages": PROMPT, "max_tokens": cap}).choices[0].text_deltas) \
        == DEFAULT_DELTAS


@pytest.mark.parametrize("cap", [1, 5, DEFAULT_DELTAS - 1])
def test_a_cap_below_the_answer_cuts_it_with_length(running: ServerThread, cap: int) -> None:
    whole = expected_reply({"model": "m", "messages": PROMPT}).text
    choice = _chat(running, max_tokens=cap)
    text = choice["message"]["content"]  # type: ignore[index]
    assert isinstance(text, str) and whole.startswith(text) and text != whole
    assert choice["finish_reason"] == "length"


def test_a_long_stream_is_asked_for_by_name(running: ServerThread) -> None:
    """``fill-max-tokens``: the answer goes on to the cap (tests and benchmarks that need a
    long stream), finishing ``stop`` as before; ``expected_reply`` follows the model suffix."""
    request = {"model": "m@fill-max-tokens", "messages": PROMPT, "max_tokens": 200}
    choice = _chat(running, model="m@fill-max-tokens", max_tokens=200)
    expected = expected_reply(request)
    assert choice["message"]["content"] == expected.text  # type: ignore[index]
    assert len(build_script(request, "fill-max-tokens").choices[0].text_deltas) == 200
    assert choice["finish_reason"] == "stop"
