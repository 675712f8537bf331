"""What the embedded server's model "says": the words of a reply, before any framing.

The default reply is a short, natural answer (the demo prints it, and a person should be able to
read it), yet every run still exercises what breaks clients: multi-byte UTF-8 (``é``, ``你好``,
the two-code-point ``👋🏽``), a quote and a backslash that JSON must escape, and a newline. One
item of a tuple below is one streamed delta, as a tokenizer would cut it. The layout is relied on
by the continuation tests: within the first :data:`GREETING_DELTAS` deltas ``" 你好"`` is a whole
delta and the reply so far ends with ``👋🏽`` (so cutting between the hand and its skin-tone
modifier leaves exactly the modifier).

Pure data and pure functions: the same request always gets the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ANSWER", "GREETING_DELTAS", "reasoning_deltas", "text_deltas", "tool_arguments"]

#: The complete default answer: exactly ``DEFAULT_DELTAS`` (30) deltas.
ANSWER: tuple[str, ...] = (
    "Hello", " —", " or", " 你好", " —", " from", " fluxstream", " 👋🏽",
    "\n",
    "Your", " answer", " streams", " in", " pieces:", " a", " word,", " half", " an", " emoji,",
    ' "quoted"', " café,", " even", " C:\\temp.",
    " Each", " piece", " lands", " once,", " in", " order", ".",
)
#: Deltas of the greeting line, which ends with the emoji.
GREETING_DELTAS = 8
#: What a longer reply (``max_tokens`` above the answer's length) goes on with, repeated.
_MORE: tuple[str, ...] = (
    "\n",
    "If", " the", " connection", " drops,", " the", " reply", " resumes", " where", " it",
    " stopped:", " no", " word", " twice,", " none", " lost.",
    " Heartbeats", " and", " split", " reads", " are", " routine", " —", " déjà", " vu", " 🙂.",
    " 世界,", " naïve,", " Straße,", " Ωmega:", " all", " intact.",
)
_REASONING: tuple[str, ...] = (
    "The", " user", " wants", " a", " short", " answer.", " Greet", " them", " (你好", " is",
    " friendly),", " say", " how", " pieces", " arrive,", " keep", " it", " brief", " 🤔", ".",
)


def text_deltas(count: int, choice: int) -> tuple[str, ...]:
    """The first ``count`` deltas of choice ``choice``'s text (``count`` >= 1).

    A reply cut short reads as a cut answer (as ``max_tokens`` does to a real model); choices
    other than 0 open differently so that ``n`` choices never share their text.
    """
    head = ANSWER if choice == 0 else (f"Take {choice + 1}: hello", *ANSWER[1:])
    out = list(head[:count])
    while len(out) < count:
        out.extend(_MORE[: count - len(out)])
    return tuple(out)


def reasoning_deltas(count: int, choice: int) -> tuple[str, ...]:
    """``count`` reasoning deltas (the thought repeats if asked for more than it has)."""
    head = _REASONING
    if choice:
        head = (f"Take {choice + 1}:", " " + _REASONING[0], *_REASONING[1:])
    out = [head[i % len(head)] for i in range(count)]
    for again in range(len(head), count, len(head)):
        out[again] = " " + out[again]  # the thought starts over, after a space
    return tuple(out)


#: Natural sample values for string properties, by a word in the property's name.
_SAMPLES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("city", "location", "place", "town"), ("Zürich", "São Paulo", "東京")),
    (("timezone", "tz", "zone"), ("Europe/Zurich", "America/Sao_Paulo", "Asia/Tokyo")),
    (("lang", "language", "locale"), ("de-CH", "pt-BR", "ja-JP")),
)


def _string_value(name: str, prompt: str, call: int) -> str:
    lowered = name.lower()
    for words, samples in _SAMPLES:
        if any(word in lowered for word in words):
            return samples[call % len(samples)]
    return prompt[:48].strip() or "café"


def _schema_value(name: str, schema: Any, prompt: str, call: int) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(schema, dict) and isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][call % len(schema["enum"])]
    if kind == "integer":
        return call + 1
    if kind == "number":
        return call + 0.5
    if kind == "boolean":
        return call % 2 == 0
    if kind == "array":
        return ["é", "你好"]
    if kind == "object":
        return {"k": "v"}
    return _string_value(name, prompt, call)


def tool_arguments(tool: Any, prompt: str, call: int) -> dict[str, Any]:
    """Arguments for call number ``call`` of ``tool``, from its JSON schema (first 4 properties).

    A tool without properties gets the user's question as ``query`` (a search tool's natural
    input) plus a unit with a non-ASCII sign.
    """
    function = tool.get("function") if isinstance(tool, Mapping) else None
    params = function.get("parameters") if isinstance(function, Mapping) else None
    props = params.get("properties") if isinstance(params, Mapping) else None
    if isinstance(props, Mapping) and props:
        return {
            name: _schema_value(name, schema, prompt, call)
            for name, schema in list(props.items())[:4]
        }
    return {"query": prompt[:48].strip() or "météo", "units": "°C", "call": call}
