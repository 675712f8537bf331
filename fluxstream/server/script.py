"""Deterministic reply scripts: what the embedded server answers, computed from the request alone.

The same request always yields the same reply, down to the byte, so a client test can compute
the exact expectation with :func:`expected_reply` and assert "each reply exact" instead of
"something arrived". Nothing here reads a clock, a random source or a counter.

How a reply is derived (all of it is a pure function of the request JSON and the profile set):

* **Text** is a short natural answer (:mod:`.content`) that is still rich in what breaks
  clients: multi-byte characters (``é``, ``你好``, ``👋🏽``, a two-code-point emoji), a quote and
  a backslash that JSON must escape, a newline. One token is one delta; the number of text
  deltas is :data:`DEFAULT_DELTAS`, the whole answer, in every dialect; a length cap
  (``max_completion_tokens``, ``max_tokens``) under it cuts the answer as a real model's is
  cut, finishing ``length``, and one above it changes nothing. With the ``fill-max-tokens``
  profile the answer goes on to the cap (up to :data:`MAX_DELTAS`, finishing ``stop``): long
  streams, asked for by name by tests and benchmarks.
* **Reasoning** deltas (``reasoning_content``) precede the text when the ``reasoning`` profile
  is on or the request has ``reasoning_effort`` (other than ``"none"``). The ``think-tags``
  profile sends them inside the text instead, between ``<think>`` and ``</think>`` (the tags
  cut across deltas), as servers without a reasoning parser do.
* **Tool calls**: when ``tools`` are given (and ``tool_choice`` is not ``"none"``) the reply is
  one call per tool, up to :data:`MAX_TOOL_CALLS` (one if ``parallel_tool_calls`` is false),
  with arguments built from each tool's JSON schema (natural sample values, see
  :func:`.content.tool_arguments`); there is no text and the finish reason
  is ``tool_calls``. The arguments are streamed in small fragments interleaved across calls.
* **Structured output**: with a ``response_format`` JSON schema (or ``json_object``) the text
  is a JSON value made from the schema (:func:`.schema_value.schema_value`: every property,
  arrays of a few items, ``$ref``, ``anyOf`` with null, non-ASCII strings), streamed in small
  uneven pieces (:func:`json_pieces`); a ``tool_choice`` that forces one tool by name gives
  one call whose arguments are such a value for the tool's whole schema. ``max_tokens`` cuts
  either at that many pieces, and the finish reason is then ``length``. Profiles
  ``ignore-schema`` (plain text instead) and ``fenced-json`` (a markdown fence around the
  JSON) play models that do not quite comply.
* ``n`` choices each get their own text (opening differently) and their own finish.
* **Usage** counts words of the prompt and deltas of the reply.
* **Continuation** (assistant-prefix completion, as DeepSeek's and Mistral's ``prefix``): when
  ``messages`` end with ``{"role": "assistant", "content": P, "prefix": true}`` (any truthy
  ``prefix``), the reply is computed from the request *without* that message (the *original*
  request, see :func:`strip_prefix`), and choice 0 streams only what follows ``P`` in that
  reply's text ``T``: exactly ``T[len(P):]``, cut by code point (inside a delta, even inside a
  multi-code-point emoji such as ``👋🏽``; the first delta is the rest of the cut one, the others
  follow unchanged). Reasoning is not repeated (the prefix replaces it); id, model, finish
  reason and usage are the original reply's (usage counts the whole reply, as if the stream had
  never broken). With the ``prefix-echo`` profile the continuation first re-sends the last
  ``min(12, len(P))`` code points of ``P`` as one extra delta (an overlap the client must cut).
  The prefix is *ignored* (the answer is exactly the original request's, reasoning included)
  when ``T`` does not start with ``P`` (a provider that does not honour prefixes), when the reply
  has tool calls, and when ``n`` > 1: those are not continuable. ``T`` is cut by the
  continuation's own ``max_tokens``; with the ``prefix-as-input`` profile that cap counts only
  the deltas after ``P``, as a provider counts a prefill (the prefix is input): a client that
  asks for what is left of its cap ends with exactly the uninterrupted reply.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .content import reasoning_deltas, text_deltas, tool_arguments
from .profiles import parse_profiles
from .schema_value import schema_value
from .scripted import ScriptedReply

__all__ = [
    "CREATED",
    "DEFAULT_DELTAS",
    "ECHO_OVERLAP",
    "ERROR_PAYLOAD",
    "MAX_CHOICES",
    "MAX_DELTAS",
    "MAX_TOOL_CALLS",
    "ChoiceScript",
    "ExpectedChoice",
    "ExpectedReply",
    "ExpectedToolCall",
    "Script",
    "ToolCallScript",
    "build_script",
    "continuation_prefix",
    "dumps",
    "error_cut",
    "expected_reply",
    "forced_tool",
    "json_pieces",
    "request_digest",
    "response_schema",
    "strip_prefix",
]

#: Fixed ``created`` timestamp: a real clock would make replies differ between runs.
CREATED = 1_700_000_000
DEFAULT_DELTAS = 30
MAX_DELTAS = 100_000
MAX_CHOICES = 16
MAX_TOOL_CALLS = 3
#: Code points per streamed tool-argument fragment.
FRAGMENT_SIZE = 7
#: Code points of the prefix re-sent before a continuation under the ``prefix-echo`` profile.
ECHO_OVERLAP = 12

#: The in-band error of the ``error-midstream`` profiles: content (it is part of what a client
#: assembles, see :func:`expected_reply`), so it lives here and the renderer sends it.
ERROR_PAYLOAD: dict[str, dict[str, Any]] = {
    "error": {
        "message": "The server had an error while processing your request (fluxstream fault).",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
}


def dumps(obj: object) -> str:
    """Compact JSON with raw UTF-8 (no ``\\u`` escapes), keys in insertion order.

    Every payload the server writes goes through here, so the bytes are identical between runs
    and multi-byte characters travel as real multi-byte UTF-8 sequences.
    """
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ToolCallScript:
    """One tool call: ``arguments`` is the exact string streamed (``args`` its JSON value)."""

    index: int
    id: str
    name: str
    arguments: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ChoiceScript:
    """Everything one choice will stream, already split into deltas."""

    index: int
    reasoning_deltas: tuple[str, ...]
    text_deltas: tuple[str, ...]
    tool_calls: tuple[ToolCallScript, ...]
    #: ``(call index, fragment)`` in streaming order: the calls' fragments interleaved.
    tool_fragments: tuple[tuple[int, str], ...]
    finish_reason: str
    #: Text deltas before the error event of the error-midstream profiles (``None``: half).
    error_after: int | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_deltas)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_deltas)


@dataclass(frozen=True)
class Script:
    """The whole reply for one request, independent of how it is framed on the wire."""

    id: str
    model: str
    created: int
    choices: tuple[ChoiceScript, ...]
    usage: dict[str, Any]
    reasoning: bool
    #: The assistant prefix this reply continues (choice 0's text is what follows it), or
    #: ``None`` for an ordinary reply, including a request whose prefix was ignored.
    prefix: str | None = None


def error_cut(choice: ChoiceScript) -> int:
    """How many text deltas of ``choice`` precede the error of the error-midstream profiles
    (half of them, or all of a scripted reply's: its error follows its text)."""
    if choice.error_after is not None:
        return choice.error_after
    return len(choice.text_deltas) // 2


@dataclass(frozen=True)
class ExpectedToolCall:
    """A tool call a correct client must assemble (part of :class:`ExpectedChoice`)."""

    index: int
    id: str
    name: str
    #: The exact arguments string (for ``object-args``: the object as compact JSON, raw UTF-8).
    arguments: str


@dataclass(frozen=True)
class ExpectedChoice:
    """One choice of an :class:`ExpectedReply`: its text, reasoning, tool calls and finish."""

    index: int
    text: str
    reasoning: str | None
    tool_calls: list[ExpectedToolCall]
    #: ``None`` when the stream fails before this choice finishes (``error-midstream``).
    finish_reason: str | None


@dataclass(frozen=True)
class ExpectedReply:
    """What a correct client must assemble from this server's answer to a request."""

    id: str
    model: str
    choices: list[ExpectedChoice]
    #: The usage object if the server sends one (non-streaming, or ``include_usage``), else None.
    usage: dict[str, Any] | None
    #: The ``error`` object of an ``error-midstream`` profile, else None.
    error: dict[str, Any] | None = None
    #: Whether the stream ends with ``data: [DONE]``.
    done: bool = True
    #: False when the answer is one JSON ``chat.completion`` (``stream`` false, or ``json``).
    streamed: bool = True

    @property
    def text(self) -> str:
        return self.choices[0].text if self.choices else ""


def request_digest(request: Mapping[str, Any]) -> str:
    """A stable hash of the request, ignoring the keys that only change framing.

    Keys are sorted so that two clients serialising the same request in a different key order
    get the same reply id; ``stream``/``stream_options`` are left out so the streaming and the
    non-streaming answers to one request share their id.
    """
    core = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    blob = json.dumps(core, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256()
    for start in range(0, len(blob), _WINDOW):  # no whole encoded copy of a large request
        digest.update(blob[start : start + _WINDOW].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


#: Characters of a (possibly megabytes long) request text handled at once.
_WINDOW = 256 * 1024


def _word_count(text: str) -> int:
    """``len(text.split())`` without a list of every word (a 6 MiB prompt is millions)."""
    words = 0
    for start in range(_WINDOW, len(text) + _WINDOW, _WINDOW):
        words += len(text[start - _WINDOW : start].split())
        if start < len(text) and not text[start - 1].isspace() and not text[start].isspace():
            words -= 1  # one word across the cut, counted on both sides
    return words


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def _prompt(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def _int_param(request: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = request.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _fragments(text: str) -> list[str]:
    return [text[i : i + FRAGMENT_SIZE] for i in range(0, len(text), FRAGMENT_SIZE)] or [""]


#: Code points per piece of streamed structured JSON, in a cycle: small and uneven, so pieces
#: end inside strings, escapes, numbers, keys and multi-code-point emoji alike.
_PIECE_SIZES = (3, 5, 2, 7, 4, 1, 6)
#: What a ``json_object`` response format (no schema) gets.
_JSON_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["answer", "confidence"],
}


def json_pieces(text: str) -> tuple[str, ...]:
    """``text`` cut into the small uneven pieces structured output is streamed in."""
    out: list[str] = []
    pos = 0
    for i in range(len(text)):
        if pos >= len(text):
            break
        size = _PIECE_SIZES[i % len(_PIECE_SIZES)]
        out.append(text[pos : pos + size])
        pos += size
    return tuple(out) or ("",)


def response_schema(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema the reply's content must fit (chat ``response_format``), or ``None``.

    ``{"type": "json_schema", "json_schema": {"schema": S}}`` gives ``S``; ``json_object``
    gives a small fixed object schema.
    """
    fmt = request.get("response_format")
    if not isinstance(fmt, Mapping):
        return None
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        return schema if isinstance(schema, Mapping) else {"type": "object"}
    if fmt.get("type") == "json_object":
        return _JSON_OBJECT_SCHEMA
    return None


def _tool_name(tool: Any) -> str | None:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else None


def forced_tool(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The tool ``tool_choice`` forces by name (``{"type": "function", "function": {"name":
    N}}``), if it is among ``tools``: its arguments are the whole schema-shaped value."""
    choice = request.get("tool_choice")
    function = choice.get("function") if isinstance(choice, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    tools = request.get("tools")
    if not isinstance(name, str) or not isinstance(tools, list):
        return None
    return next((t for t in tools if _tool_name(t) == name), None)


def _interleave(calls: Sequence[ToolCallScript]) -> tuple[tuple[int, str], ...]:
    queues = [_fragments(call.arguments) for call in calls]
    out: list[tuple[int, str]] = []
    for round_ in range(max((len(q) for q in queues), default=0)):
        for call, queue in zip(calls, queues, strict=True):
            if round_ < len(queue):
                out.append((call.index, queue[round_]))
    return tuple(out)


def continuation_prefix(request: Mapping[str, Any]) -> str | None:
    """The assistant prefix ``P`` that ``request`` asks to continue, or ``None``.

    A request is a continuation when its last message is ``{"role": "assistant", "content": P,
    "prefix": <truthy>}``. ``content`` may be a string, a list of text parts (concatenated) or
    ``null`` (the empty prefix).
    """
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or not last.get("prefix"):
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(t for t in texts if isinstance(t, str))
    return ""


def strip_prefix(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` without its trailing assistant-prefix message (a copy; unchanged otherwise).

    This is the *original* request a continuation resumes: ``expected_reply(strip_prefix(r))``
    is the uninterrupted reply that a client resuming with ``r`` must end up with.
    """
    if continuation_prefix(request) is None:
        return dict(request)
    messages = request["messages"]
    return {**request, "messages": list(messages[:-1])}


def _deltas_after(deltas: Sequence[str], skip: int) -> tuple[str, ...]:
    """The deltas that follow the first ``skip`` code points of ``"".join(deltas)``."""
    out: list[str] = []
    pos = 0
    for delta in deltas:
        end = pos + len(delta)
        if end > skip:
            out.append(delta[max(0, skip - pos) :])
        pos = end
    return tuple(out)


def _continue(script: Script, prefix: str, names: frozenset[str]) -> Script:
    """The continuation of ``script`` after ``prefix``, or ``script`` if it is not continuable."""
    if len(script.choices) != 1 or script.choices[0].tool_calls:
        return script
    choice = script.choices[0]
    if not choice.text.startswith(prefix):
        return script
    deltas = _deltas_after(choice.text_deltas, len(prefix))
    if "prefix-echo" in names and prefix:
        deltas = (prefix[-ECHO_OVERLAP:], *deltas)
    continued = replace(choice, reasoning_deltas=(), text_deltas=deltas)
    return replace(script, choices=(continued,), reasoning=False, prefix=prefix)


def build_script(
    request: Mapping[str, Any],
    profiles: Iterable[str] | str | None = None,
    *,
    scripted: ScriptedReply | None = None,
) -> Script:
    """Compute the reply for ``request`` (the chat-completions JSON body) under ``profiles``.

    ``scripted``: the content a test stated (:mod:`.scripted`), said instead of the computed
    one (ids and continuation stay the request's; ``max_tokens`` does not cut it).

    A continuation request (see :func:`continuation_prefix`) gets the continuation of the
    original request's reply (see the module docstring). ``max_tokens`` only ever shortens the
    plain answer (fewer than :data:`DEFAULT_DELTAS`: it finishes ``length``), unless the
    ``fill-max-tokens`` profile asks for an answer as long as the cap. Structured content
    (:func:`response_schema`, :func:`forced_tool`) is always cut by ``max_tokens`` with finish
    ``length``.
    """
    names = parse_profiles(profiles)
    prefix = continuation_prefix(request)
    if prefix is None:
        return _scripted(request, scripted) if scripted else _build(request, names)
    original = strip_prefix(request)
    if scripted is not None:
        return _continue(_scripted(original, scripted), prefix, names)
    if "prefix-as-input" in names:
        original = _cap_after_prefix(original, prefix, names)
    return _continue(_build(original, names), prefix, names)


def _scripted(request: Mapping[str, Any], scripted: ScriptedReply) -> Script:
    """The script of a stated reply: its content, the request's ids and model."""
    plain = dict.fromkeys(("tools", "response_format", "n", *_CAPS))
    computed = _build({**request, **plain}, frozenset())
    digest = computed.id.removeprefix("chatcmpl-")
    choices: list[ChoiceScript] = []
    for c, choice in enumerate(scripted.choices):
        calls = tuple(
            ToolCallScript(k, f"call_{digest[:12]}_{c}_{k}", call.name,
                           dumps(dict(call.arguments)), dict(call.arguments))
            for k, call in enumerate(choice.tool_calls)
        )
        finish = choice.finish_reason or ("tool_calls" if calls else "stop")
        choices.append(ChoiceScript(
            index=c, reasoning_deltas=choice.reasoning, text_deltas=choice.text,
            tool_calls=calls, tool_fragments=_interleave(calls), finish_reason=finish,
            error_after=len(choice.text) if scripted.error else None,
        ))
    completion = sum(
        len(ch.reasoning_deltas) + len(ch.text_deltas) + len(ch.tool_fragments) for ch in choices
    )
    prompt = computed.usage["prompt_tokens"]
    usage: dict[str, Any] = {
        **computed.usage,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {
            "reasoning_tokens": sum(len(ch.reasoning_deltas) for ch in choices)
        },
    }
    usage.update(scripted.usage or {})
    if scripted.usage and "total_tokens" not in scripted.usage:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return replace(computed, choices=tuple(choices), usage=usage,
                   reasoning=any(ch.reasoning_deltas for ch in choices))


_CAPS = ("max_completion_tokens", "max_tokens")


def _cap_after_prefix(
    request: dict[str, Any], prefix: str, names: frozenset[str]
) -> dict[str, Any]:
    """The ``prefix-as-input`` profile: the original request of a continuation whose length
    cap counts only what it generates, as a provider counts a prefill (it is input): its cap
    plus the deltas ``prefix`` holds whole (a delta it holds part of is generated again:
    its rest is the continuation's first delta)."""
    limit = _int_param(request, *_CAPS)
    if limit is None or not prefix:
        return request
    # Each delta holds a code point or more: the prefix's fit in this many.
    longer = _build(_capped(request, limit + len(prefix)), names)
    if len(longer.choices) != 1:
        return request
    held = end = 0
    for delta in longer.choices[0].text_deltas:
        end += len(delta)
        if end > len(prefix):
            break
        held += 1
    return _capped(request, limit + held)


def _capped(request: dict[str, Any], limit: int) -> dict[str, Any]:
    """``request`` with ``limit`` in each of its cap fields."""
    names = [n for n in _CAPS if _int_param(request, n) is not None]
    return {**request, **dict.fromkeys(names, limit)}


def _forced_call(
    tool: Mapping[str, Any], digest: str, choice: int, limit: int | None
) -> tuple[ToolCallScript, tuple[tuple[int, str], ...], bool]:
    """The one call of a forced tool: the whole schema-shaped value, cut at ``limit`` pieces."""
    function = tool.get("function")
    params = function.get("parameters") if isinstance(function, Mapping) else None
    value = schema_value(params if isinstance(params, Mapping) else {"type": "object"}, seed=choice)
    args = value if isinstance(value, dict) else {"value": value}
    pieces = json_pieces(dumps(args))
    cut = limit is not None and len(pieces) > limit
    if cut:
        pieces = pieces[:limit]
    call = ToolCallScript(
        index=0,
        id=f"call_{digest[:12]}_{choice}_0",
        name=_tool_name(tool) or "tool_0",
        arguments="".join(pieces),
        args=args,
    )
    return call, tuple((0, p) for p in pieces), cut


def _build(request: Mapping[str, Any], names: frozenset[str]) -> Script:
    digest = request_digest(request)
    messages = request.get("messages")
    prompt = _prompt(messages if isinstance(messages, list) else [])
    model = request.get("model")
    model_name = model.partition("@")[0] if isinstance(model, str) else "fluxstream"
    limit = _int_param(request, "max_completion_tokens", "max_tokens")
    limit = None if limit is None else max(1, min(limit, MAX_DELTAS))
    count = DEFAULT_DELTAS if limit is None else limit
    if "fill-max-tokens" not in names:  # a real model's answer: a cap only ever cuts it
        count = min(count, DEFAULT_DELTAS)
    schema = None if "ignore-schema" in names else response_schema(request)
    forced = forced_tool(request)
    n = _int_param(request, "n") or 1
    n = max(1, min(n, MAX_CHOICES))
    effort = request.get("reasoning_effort")
    tagged = "think-tags" in names
    reasoning = tagged or "reasoning" in names or (effort is not None and effort != "none")
    tools = request.get("tools")
    use_tools = isinstance(tools, list) and bool(tools) and request.get("tool_choice") != "none"
    max_calls = 1 if request.get("parallel_tool_calls") is False else MAX_TOOL_CALLS

    choices: list[ChoiceScript] = []
    for c in range(n):
        rdeltas = reasoning_deltas(max(1, count // 2), c) if reasoning else ()
        calls: tuple[ToolCallScript, ...] = ()
        if use_tools and forced is not None:
            call, fragments, cut = _forced_call(forced, digest, c, limit)
            choices.append(
                ChoiceScript(
                    index=c,
                    reasoning_deltas=rdeltas,
                    text_deltas=(),
                    tool_calls=(call,),
                    tool_fragments=fragments,
                    finish_reason="length" if cut else "tool_calls",
                )
            )
            continue
        if use_tools:
            assert isinstance(tools, list)
            built = []
            for k, tool in enumerate(tools[:max_calls]):
                function = tool.get("function") if isinstance(tool, dict) else None
                name = function.get("name") if isinstance(function, dict) else None
                args = tool_arguments(tool, prompt, k)
                built.append(
                    ToolCallScript(
                        index=k,
                        id=f"call_{digest[:12]}_{c}_{k}",
                        name=name if isinstance(name, str) else f"tool_{k}",
                        arguments=dumps(args),
                        args=args,
                    )
                )
            calls = tuple(built)
        finish = "tool_calls" if calls else "stop"
        texts: tuple[str, ...] = ()
        if calls:
            pass
        elif schema is not None:
            texts = json_pieces(dumps(schema_value(schema, seed=c)))
            if "fenced-json" in names:
                texts = ("```json\n", *texts, "\n```")
            if limit is not None and len(texts) > limit:
                texts, finish = texts[:limit], "length"
        else:
            texts = text_deltas(count, c)
            if limit is not None and limit < DEFAULT_DELTAS:
                finish = "length"  # the answer was cut, as a real model's is: in every API
            if tagged:  # the reasoning goes into the text, its tags cut as a tokenizer cuts
                texts = ("<", "thi", "nk>", *rdeltas, "</th", "ink>", "\n\n", *texts)
                rdeltas = ()
                if limit is not None:  # the cap counts the reasoning too, as a model's does
                    texts = texts[:limit]
        choices.append(
            ChoiceScript(
                index=c,
                reasoning_deltas=rdeltas,
                text_deltas=texts,
                tool_calls=calls,
                tool_fragments=_interleave(calls),
                finish_reason=finish,
            )
        )

    prompt_tokens = len(messages) if isinstance(messages, list) else 0
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                prompt_tokens += _word_count(_content_text(message.get("content")))
    reasoning_tokens = sum(len(ch.reasoning_deltas) for ch in choices)
    completion_tokens = reasoning_tokens + sum(
        len(ch.text_deltas) + len(ch.tool_fragments) for ch in choices
    )
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }
    return Script(
        id=f"chatcmpl-{digest[:24]}",
        model=model_name,
        created=CREATED,
        choices=tuple(choices),
        usage=usage,
        reasoning=reasoning and not tagged,
    )


def expected_reply(
    request: Mapping[str, Any], profile: Iterable[str] | str | None = None
) -> ExpectedReply:
    """What a correct client assembles from the server's answer to ``request``.

    ``profile`` is the effective profile set (as given to the server or in the request header).
    The model-name suffix (``"m@azure"``) is honoured as well, like the server does. Faults do
    not change the content: a client that resumes or retries correctly still ends up here.

    For a continuation request (last message ``{"role": "assistant", "content": P, "prefix":
    true}``) this describes that one response as streamed: the text is the continuation part
    (``T[len(P):]``, preceded by the overlap under ``prefix-echo``), reasoning is ``None``, and
    id, finish reason and usage are the original reply's. The uninterrupted reply a resuming
    client must end up with is simply the original request's:
    ``expected_reply(strip_prefix(request))`` (i.e. ``expected_reply(original_request)``);
    under ``prefix-as-input`` the original request's cap is the continuation's plus the
    deltas the prefix holds (see :func:`build_script`).
    """
    names = set(parse_profiles(profile))
    model = request.get("model")
    if isinstance(model, str) and "@" in model:
        names |= parse_profiles(model.partition("@")[2])
    script = build_script(request, names)

    streamed = bool(request.get("stream")) and "json" not in names
    error_mid = streamed and bool(names & {"error-midstream", "error-midstream-done"})
    stream_options = request.get("stream_options")
    include_usage = isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))
    choices: list[ExpectedChoice] = []
    for ch in script.choices:
        calls = [
            ExpectedToolCall(index=t.index, id=t.id, name=t.name, arguments=t.arguments)
            for t in ch.tool_calls
        ]
        text, reasoning = ch.text, ch.reasoning if script.reasoning else None
        finish: str | None = ch.finish_reason
        if error_mid:
            text = "".join(ch.text_deltas[: error_cut(ch)])
            finish = None
            calls = [] if ch.tool_calls else calls
        choices.append(ExpectedChoice(ch.index, text, reasoning, calls, finish))
    usage = None
    if not streamed or (include_usage and not error_mid):
        usage = script.usage
    return ExpectedReply(
        id=script.id,
        model=script.model,
        choices=choices,
        usage=usage,
        error=dict(ERROR_PAYLOAD["error"]) if error_mid else None,
        done=streamed
        and "no-done" not in names
        and (not error_mid or "error-midstream-done" in names),
        streamed=streamed,
    )
