"""The vocabularies a user prints read as their values: ``print(reply.outcome)`` shows
``done``, as the documentation writes it, not ``Outcome.DONE``.

They are ``str`` enums so that they compare equal to their values; since Python 3.11 ``str()``
and ``format()`` of such an enum give ``Class.MEMBER`` instead (3.10 gave the value to
``format()`` only), and ``StrEnum`` is not on 3.10, so each says how it prints itself.
"""

from __future__ import annotations

import json
import logging
from enum import Enum

import pytest

from fluxstream import Deadline, Outcome, SegmentEnd, replay

VOCABULARIES: list[type[Enum]] = [Outcome, SegmentEnd, Deadline]


@pytest.mark.parametrize("vocabulary", VOCABULARIES, ids=lambda kind: kind.__name__)
def test_every_member_prints_and_formats_as_its_value(vocabulary: type[Enum]) -> None:
    for member in vocabulary:
        assert str(member) == member.value
        assert f"{member}" == member.value
        assert f"{member:>12}" == format(member.value, ">12")
        assert "%s" % (member,) == member.value  # noqa: UP031 - what logging does
        assert member == member.value  # still a str: compares equal to its value
        assert repr(member).startswith(f"<{vocabulary.__name__}.")  # repr stays telling
        assert json.dumps(member) == json.dumps(member.value)


def test_a_replayed_reply_prints_its_outcome_as_a_word(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"},
                                     "finish_reason": "stop"}]}
    reply = replay([f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()])
    print(reply.outcome)
    assert capsys.readouterr().out == "done\n"
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("ended %s", reply.outcome)
    assert caplog.messages == ["ended done"]
