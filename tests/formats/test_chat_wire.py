"""The wire models accept every chunk shape of the corpus and keep what they do not know."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_chat_fixtures import FILES, IDS, require_fixtures

from fluxstream._wire import ChatCompletionChunk, ContentPart, Usage


def _payloads(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    out = []
    for block in text.split("\n\n"):
        data = "\n".join(
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        )
        if data.strip().startswith("{"):
            try:
                json.loads(data)
            except ValueError:
                continue  # the cut payload of cc-syn-cut-mid-json
            out.append(data)
    return out


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_corpus_chunk_validates(path: Path) -> None:
    require_fixtures()
    for data in _payloads(path):
        chunk = ChatCompletionChunk.model_validate_json(data)
        # Nothing is lost: unknown fields are kept, so a dump gives back the payload.
        assert chunk.model_dump(exclude_unset=True) == json.loads(data)


def test_lenient_shapes() -> None:
    chunk = ChatCompletionChunk.model_validate(
        {"choices": None, "prompt_filter_results": [{"prompt_index": 0}], "x_groq": {"id": 1}}
    )
    assert chunk.choices == [] and chunk.model_extra == {
        "prompt_filter_results": [{"prompt_index": 0}], "x_groq": {"id": 1}}
    chunk = ChatCompletionChunk.model_validate({"choices": [{"delta": {"tool_calls": None}}]})
    assert chunk.choices[0].delta is not None and chunk.choices[0].delta.tool_calls == []
    assert ChatCompletionChunk.model_validate({}).id is None


def test_content_parts_and_object_arguments() -> None:
    chunk = ChatCompletionChunk.model_validate({"choices": [{"index": 0, "delta": {
        "content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]},
                    {"type": "text", "text": "4"}],
        "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
    }}]})
    delta = chunk.choices[0].delta
    assert delta is not None and isinstance(delta.content, list)
    thinking, text = delta.content
    assert isinstance(thinking.thinking, list) and thinking.thinking[0] == ContentPart(
        type="text", text="hm")
    assert text.text == "4"
    call = delta.tool_calls[0]
    assert call.index is None and call.function is not None
    assert call.function.arguments == {"a": 1}


def test_usage_keeps_provider_counters() -> None:
    usage = Usage.model_validate({
        "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
        "prompt_cache_hit_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 8, "novel": 1},
        "completion_tokens_details": {"reasoning_tokens": 2},
    })
    assert usage.model_extra == {"prompt_cache_hit_tokens": 8}
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 8
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 2
