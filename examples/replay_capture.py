"""Assemble a recorded stream without any network: the fast path for tests and fixtures.

``data/capture-heartbeats.json`` was recorded with ``fluxstream capture`` (read boundaries and
timing kept); a plain ``.sse`` body works too.   python examples/replay_capture.py
"""

from __future__ import annotations

from pathlib import Path

import fluxstream
from fluxstream.cli import load_fixture

HERE = Path(__file__).parent


def main() -> None:
    reads = load_fixture(str(HERE / "data" / "capture-heartbeats.json"))
    reply = fluxstream.replay(reads, content_key="capture")
    print(reply.text)
    print(f"outcome={reply.outcome.value} finish={reply.choices[0].finish_reason} "
          f"heartbeats={reply.heartbeats} bytes={reply.bytes}")

    # The same bytes one at a time give the same reply: read boundaries never matter.
    body = b"".join(reads)
    one_byte = fluxstream.replay((body[i : i + 1] for i in range(len(body))), content_key="capture")
    assert one_byte == reply, "read boundaries changed the reply"
    print("one byte per read: identical reply")


if __name__ == "__main__":
    main()
