"""SSE bytes for tests, written out exactly: one builder instead of a ``frame()`` per test file.

A payload is a JSON object (``json.dumps`` with its default separators, so the bytes are the
ones a Python server writes), or a ``str`` / ``bytes`` sent as it is (a raw JSON text whose
escapes must stay as a server wrote them, ``[DONE]``, or junk). The event's fields come in the
order servers write them: ``id:``, then ``event:``, then one ``data:`` line.

The Chat Completions helpers write the chunk the client tests use:
``{"id": "c", "model": "m", "choices": [...]}`` (``typed=True`` adds
``"object": "chat.completion.chunk"`` after the id, as OpenAI writes it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CHAT_FINISH", "DONE", "Payload", "chat_choice", "chat_chunk", "chat_frame", "chat_text",
    "frame", "frames",
]

Payload = Mapping[str, Any] | str | bytes

#: The ``[DONE]`` sentinel that ends a Chat Completions stream.
DONE = b"data: [DONE]\n\n"


def _data(payload: Payload) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload).encode()


def frame(
    payload: Payload, event: str | None = None, *, id: str | None = None, eol: str = "\n"
) -> bytes:
    """One event: its ``id:`` and ``event:`` lines when given, one ``data:`` line, a blank
    line; every line ended by ``eol``."""
    end = eol.encode()
    out = b""
    if id is not None:
        out += b"id: " + id.encode() + end
    if event is not None:
        out += b"event: " + event.encode() + end
    return out + b"data: " + _data(payload) + end + end


def frames(*payloads: Payload, named: bool = False, done: bool = False, eol: str = "\n") -> bytes:
    """One event per payload. ``named``: a JSON object's ``type`` (when it is a string) is its
    event's name, as the Responses and Anthropic APIs write them. ``done``: then ``[DONE]``."""
    out = b"".join(
        frame(p, event=_type(p) if named else None, eol=eol) for p in payloads
    )
    return out + (frame("[DONE]", eol=eol) if done else b"")


def _type(payload: Payload) -> str | None:
    kind = payload.get("type") if isinstance(payload, Mapping) else None
    return kind if isinstance(kind, str) else None


def chat_chunk(
    *choices: Mapping[str, Any], id: str = "c", model: str = "m", typed: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A Chat Completions chunk: ``id``, (``object`` when ``typed``), ``model``, ``choices``,
    then ``extra`` (``usage``...) in the order given."""
    chunk: dict[str, Any] = {"id": id}
    if typed:
        chunk["object"] = "chat.completion.chunk"
    chunk["model"] = model
    chunk["choices"] = list(choices)
    chunk.update(extra)
    return chunk


def chat_choice(
    text: str | None = None, *, finish: str | None = None, index: int = 0,
    with_finish: bool = False,
) -> dict[str, Any]:
    """A choice of a chunk: ``{"index", "delta"}`` (``delta`` holds ``content`` unless
    ``text`` is ``None``), with ``finish_reason`` when ``finish`` is given or ``with_finish``
    (``null`` then, as OpenAI writes every chunk)."""
    choice: dict[str, Any] = {"index": index, "delta": {} if text is None else {"content": text}}
    if finish is not None or with_finish:
        choice["finish_reason"] = finish
    return choice


def chat_frame(
    *choices: Mapping[str, Any], event_id: str | None = None, **chunk: Any
) -> bytes:
    """A Chat Completions chunk as one event (``event_id``: its ``id:`` line); ``chunk`` goes
    to :func:`chat_chunk`."""
    return frame(chat_chunk(*choices, **chunk), id=event_id)


def chat_text(text: str, event_id: str | None = None, **chunk: Any) -> bytes:
    """A chunk whose one choice's delta is ``text`` (``event_id``: its ``id:`` line)."""
    return chat_frame(chat_choice(text), event_id=event_id, **chunk)


#: The chunk that ends choice 0 with ``stop``.
CHAT_FINISH = chat_frame(chat_choice(finish="stop"))
