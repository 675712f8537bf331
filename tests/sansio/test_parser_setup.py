"""What a fresh ``StreamParser`` sets up: its generated content key."""

from __future__ import annotations

import random
import uuid

import pytest

from fluxstream import _parser as parser_module
from fluxstream._parser import StreamParser, new_content_key


@pytest.mark.parametrize("seed", range(50))
def test_generated_key_is_uuid4_hex_of_the_same_random_bytes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = random.Random(seed).randbytes(16) if seed else b"\xff" * 16
    monkeypatch.setattr(parser_module, "_RANDOM", lambda n: raw[:n])
    assert new_content_key() == uuid.UUID(bytes=raw, version=4).hex
    assert StreamParser().content_key == uuid.UUID(bytes=raw, version=4).hex


def test_generated_keys_are_version_4_and_distinct() -> None:
    keys = {StreamParser().content_key for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        parsed = uuid.UUID(hex=key)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and parsed.hex == key


def test_a_given_key_is_kept() -> None:
    assert StreamParser(content_key="mine").content_key == "mine"
