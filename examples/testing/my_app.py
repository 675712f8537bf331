"""A small app built on openai-python: it streams an answer to the screen (``show``) and
survives a connection that drops mid-reply by asking again, showing only what it has not
shown yet. ``test_my_app.py`` beside it proves that with fluxstream's testing kit."""

from __future__ import annotations

import logging
from collections.abc import Callable

import openai

log = logging.getLogger("my_app")

#: Attempts per question (the first, and the retries after a drop).
ATTEMPTS = 3


def ask(client: openai.OpenAI, question: str, show: Callable[[str], None]) -> str:
    """Stream the answer to ``question`` into ``show``; return the whole answer."""
    shown = ""
    for attempt in range(1, ATTEMPTS + 1):
        text = ""
        try:
            stream = client.chat.completions.create(
                model="gpt-4o-mini", stream=True,
                messages=[{"role": "user", "content": question}],
            )
            with stream:
                for chunk in stream:
                    if not chunk.choices or not chunk.choices[0].delta.content:
                        continue
                    text += chunk.choices[0].delta.content
                    if len(text) > len(shown):  # what a retry says again is not shown twice
                        show(text[len(shown):])
                        shown = text
            return text
        except openai.APIConnectionError as exc:
            log.warning("attempt %d of %d broke after %d characters: %s",
                        attempt, ATTEMPTS, len(text), exc)
    raise RuntimeError(f"no whole answer after {ATTEMPTS} attempts")


def first_words(client: openai.OpenAI, question: str, words: int) -> str:
    """The first ``words`` words of the answer; the rest is not waited for (the stream is
    closed, so the server stops generating and the connection is freed)."""
    text = ""
    with client.chat.completions.create(
        model="gpt-4o-mini", stream=True, messages=[{"role": "user", "content": question}],
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
                if len(text.split()) > words:
                    break
    return " ".join(text.split()[:words])
