"""``Api``: everything fluxstream knows about one provider API, as data and pure functions.

A provider API is more than its wire format: the path a request is posted to, how the key is
sent, which statuses are worth a retry, how structured output and tools are asked for, how a
dropped reply is continued or re-read. Each of those used to be a switch on a string (a
format name, a path, a URL's last segment) in whichever module needed it, with a silent
fallback to one API when the string was another. Here each API is one object, subclassing
:class:`Api` in a module of its own, and every caller asks it; nothing is "chat by default".

Sans-IO: an ``Api`` builds and reads plain dicts and strings. It never sends anything; the
I/O layer carries an ``Api`` in each request (:class:`~fluxstream._io.attempt.RequestSpec`)
and asks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote

from ..errors import FluxstreamError
from ..formats import FORMATS

__all__ = ["CONTINUE_INSTRUCTION", "Api", "ApiFeatureError", "Structured", "UnknownApiError",
           "bearer"]

#: The user turn after a partial answer sent back to an API without prefill
#: (:meth:`Api.instructed_continuation_body`): the rest, with nothing repeated or added.
CONTINUE_INSTRUCTION = (
    "Your previous message was cut off. Continue it from exactly where it stopped, "
    "mid-word if need be: do not repeat any of it and add nothing before the continuation."
)


class UnknownApiError(FluxstreamError, LookupError):
    """A name that no registered :class:`Api` has; the message lists the names that are."""


class ApiFeatureError(FluxstreamError, NotImplementedError):
    """A request asked an :class:`Api` for something it does not offer (structured output, a
    continuation, a re-read of a stored response): refused rather than shaped the way
    another API would want it."""


@dataclass(frozen=True)
class Structured:
    """The type a stream's object is validated as, and where the object is: the content of
    choice 0, or (Anthropic) the arguments of the forced tool named ``tool``."""

    type: Any
    tool: str | None = None


def bearer(key: str) -> tuple[str, str]:
    """The key as an HTTP Bearer token (RFC 6750): the ``Authorization`` header."""
    return "authorization", f"Bearer {key}"


class Api:
    """One provider API. Subclasses set the class attributes and override what differs.

    The base class implements only what every API here shares (tools go in ``tools``, the key
    is a Bearer token, no re-read of stored responses, turns of ``role`` and ``content``);
    anything an API must say for itself (structured output, continuation, where its system
    prompt goes, the shape of its tools) raises :class:`ApiFeatureError` until it does.
    """

    #: The API's one name: its wire format's (:data:`fluxstream.formats.FORMATS`), the CLI's
    #: ``--format``, the resume token's ``api``, the embedded server's dialect, and the
    #: prefix of its recorded fixtures.
    name: ClassVar[str]
    #: How people name it ("Chat Completions"), for help and summaries.
    title: ClassVar[str]
    #: Whose API it is, for messages that say where a request goes ("Anthropic's API").
    vendor: ClassVar[str]
    #: Its ``gen_ai.provider.name`` in the OpenTelemetry GenAI conventions (``"openai"``,
    #: ``"anthropic"``), for traces (:mod:`fluxstream.otel`); ``None``: none of theirs.
    provider: ClassVar[str | None] = None
    #: Its ``gen_ai.operation.name`` in the same conventions: what a streamed request is.
    operation: ClassVar[str] = "chat"
    #: The path under the client's ``base_url`` that a streaming request is posted to.
    path: ClassVar[str]
    #: The attribute of :class:`~fluxstream._client.AsyncClient` that serves it (``client.chat``).
    endpoint: ClassVar[str]
    #: Headers every request of this API carries (a version pin), under the request's own.
    headers: ClassVar[Mapping[str, str]] = {}
    #: Statuses worth a retry before any content, on top of the policy's own (an API's
    #: "overloaded").
    retry_statuses: ClassVar[frozenset[int]] = frozenset()
    #: The fields a continuation's appended assistant message carries instead of the policy's
    #: default ``prefix`` flag (``None``: the default stays; a flag the caller chose is kept).
    continuation_flag: ClassVar[Mapping[str, object] | None] = None
    #: The request field holding the conversation (Responses calls it ``input``).
    messages_field: ClassVar[str] = "messages"
    #: The request field capping the reply's length.
    max_tokens_field: ClassVar[str] = "max_tokens"
    #: The sampling settings every API shares, by their Chat Completions names, as this API
    #: names them; a setting missing here is one the API does not have (failover leaves it
    #: out rather than send a field the server would refuse).
    sampling_names: ClassVar[Mapping[str, str]] = {
        "temperature": "temperature", "top_p": "top_p", "stop": "stop",
    }
    #: The request parameters a trace records (the OpenTelemetry GenAI conventions'
    #: ``gen_ai.request.*``: ``max_tokens``, ``temperature``, ``top_p``, ``top_k``,
    #: ``frequency_penalty``, ``presence_penalty``, ``seed``, ``stop``, ``n``), by their Chat
    #: Completions names, and this API's own names for them where it has its own
    #: (:meth:`parameter_fields`).
    parameter_names: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: What to send as :attr:`max_tokens_field` when the API requires it and none was given
    #: (``None``: the API does not require it).
    default_max_tokens: ClassVar[int | None] = None
    #: The environment variables an SDK of this API reads its root URL and key from.
    base_url_variable: ClassVar[str] = "OPENAI_BASE_URL"
    api_key_variable: ClassVar[str] = "OPENAI_API_KEY"
    #: The vendor's public API root.
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    #: Whether the API's stream numbers its events with SSE ids, so that a dropped stream can
    #: go on with ``Last-Event-ID`` (otherwise the embedded server numbers them on request).
    event_ids: ClassVar[bool] = False
    #: Whether a dropped reply is best continued by sending it back as a prefill (the API
    #: has neither event ids nor a stored response to re-read).
    prefill_resume: ClassVar[bool] = False
    #: Whether the vendor's own servers go on from a trailing assistant turn (prefill), so
    #: that another upstream's cut reply can be continued there by
    #: :meth:`continuation_body`; otherwise by :meth:`instructed_continuation_body`.
    assistant_prefill: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"<fluxstream.apis.Api {self.name!r}>"

    # ------------------------------------------------------------------ the wire

    @property
    def format_class(self) -> Any:
        """The wire format that reads this API's stream (``FORMATS[name]``)."""
        return FORMATS[self.name]

    # ------------------------------------------------------------------ authentication

    def credential(self, key: str) -> tuple[str, str]:
        """The header (lowercased name, value) that carries the API key."""
        return bearer(key)

    # ------------------------------------------------------------------ requests

    def add_tools(self, body: dict[str, Any], tools: Sequence[Mapping[str, Any]]) -> None:
        """Put ``tools`` (already in this API's shape) into ``body``."""
        body["tools"] = list(tools)

    def function_tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Function declarations (``name``, ``parameters``, optional ``description``) as this
        API's tools."""
        raise ApiFeatureError(f"the {self.title} API has no function tools here")

    def put_response_format(self, body: dict[str, Any], fmt: Any) -> None:
        """Put ``fmt`` (a type, or a provider ``dict`` passed through untouched) into
        ``body`` the way this API asks for structured output."""
        raise ApiFeatureError(f"the {self.title} API has no structured output here")

    def asks_for_json(self, fields: Mapping[str, Any]) -> bool:
        """Whether a request's own fields ask for a JSON reply (structured output given as
        the provider's ``dict``): Chat Completions' ``response_format`` of type
        ``json_schema`` or ``json_object``. An API that asks for it elsewhere says so; one
        whose structured output is a forced tool (Anthropic) never has JSON content."""
        fmt = fields.get("response_format")
        return isinstance(fmt, Mapping) and fmt.get("type") in ("json_schema", "json_object")

    def structured(self, fmt: Any) -> Structured | None:
        """What to track for ``fmt`` when the request already carries it (a resumed
        stream's body): the type; nothing for a ``dict`` (a provider format passed through,
        no type to build)."""
        if fmt is None or isinstance(fmt, dict):
            return None
        return Structured(fmt)

    def structured_request(self, body: dict[str, Any], fmt: Any) -> Structured | None:
        """Put ``fmt`` into ``body`` (:meth:`put_response_format`); the type to track, if
        any."""
        if fmt is None:
            return None
        self.put_response_format(body, fmt)
        return self.structured(fmt)

    def sampling(self, shared: Mapping[str, Any]) -> dict[str, Any]:
        """``shared`` (sampling settings by their Chat Completions names) as this API's
        request fields; a ``stop`` string becomes a list, as every API takes one."""
        fields: dict[str, Any] = {}
        for name, value in shared.items():
            own = self.sampling_names.get(name)
            if own is not None:
                fields[own] = [value] if name == "stop" and isinstance(value, str) else value
        return fields

    def request_settings(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Where ``body`` keeps its length cap and sampling settings (the top level, except
        for an API that nests them)."""
        return body

    def parameter_fields(self, parameter: str) -> tuple[str, ...]:
        """The fields of :meth:`request_settings` that may hold ``parameter`` (a Chat
        Completions name, as :attr:`parameter_names`), in order: this API's own names, then
        that name itself (a request that carries it asked for it, whatever the API); the
        first that holds a usable value wins."""
        own = self.parameter_names.get(parameter, ())
        return own if parameter in own else (*own, parameter)

    def ask_usage(self, body: dict[str, Any]) -> None:
        """Make ``body`` ask the server to report the reply's usage, where the API must be
        asked (Chat Completions' ``stream_options.include_usage``), keeping what the request
        already says; the others report it unasked, and their requests are left as they are."""

    def length_cap(self, body: Mapping[str, Any]) -> int | None:
        """``body``'s output length cap (:attr:`max_tokens_field`, where the API keeps it), or
        ``None`` when it has none that is a positive ``int``."""
        cap = self.request_settings(body).get(self.max_tokens_field)
        return cap if type(cap) is int and cap > 0 else None

    def with_length_cap(self, body: Mapping[str, Any], cap: int) -> dict[str, Any]:
        """``body`` asking for at most ``cap`` output tokens, in the API's own field."""
        return {**body, self.max_tokens_field: cap}

    def conversation(
        self, model: str, messages: list[Any], fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A request for ``messages`` (in :attr:`messages_field`) and the other fields, with
        the length cap the API requires when ``fields`` has none."""
        request: dict[str, Any] = {"model": model, self.messages_field: messages}
        if self.default_max_tokens is not None:
            request[self.max_tokens_field] = self.default_max_tokens
        return {**request, **fields}

    def prompt_arguments(
        self, model: str, messages: list[Any], fields: Mapping[str, Any], *, include_usage: bool
    ) -> dict[str, Any]:
        """Keyword arguments of this API's ``stream`` (``client.<endpoint>.stream``) for
        :meth:`conversation` (``include_usage``: ask for the usage where the API needs
        asking)."""
        return self.conversation(model, messages, fields)

    def streaming_body(
        self, model: str, messages: list[Any], fields: Mapping[str, Any], *, include_usage: bool
    ) -> dict[str, Any]:
        """The streaming request body of :meth:`conversation`, to be sent as it is (what
        ``fluxstream capture`` records)."""
        body = self.conversation(model, messages, fields)
        body.setdefault("stream", True)
        return body

    def stored_body_arguments(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments of this API's ``stream`` that send a stored request ``body``
        again as it was (it already holds every option it was sent with)."""
        return {k: v for k, v in body.items() if k != "stream"}

    # ------------------------------------------------------------------ system prompt, turns, tools
    # Written and read back by failover (:func:`fluxstream.apis.portable.convert_body`): each
    # API says where its system prompt is and how its turns and tools are shaped. Where the
    # base class cannot know, it refuses: a default would give the next API another API's
    # shape, silently.

    def put_system(self, fields: dict[str, Any], messages: list[Any], text: str) -> None:
        """Put the system prompt ``text`` where this API takes it: a request field (into
        ``fields``) or a turn of its own (into ``messages``, the Chat-shaped turns
        :meth:`conversation` is given)."""
        raise ApiFeatureError(f"the {self.title} API has no system prompt here")

    def system_of(self, body: Mapping[str, Any]) -> str:
        """The system prompt ``body`` holds outside its turns, as text (``""``: none; a system
        turn of the conversation is :meth:`text_turns`')."""
        raise ApiFeatureError(f"the {self.title} API's system prompt cannot be read here")

    def text_turns(self, body: Mapping[str, Any]) -> list[tuple[Any, str]]:
        """``body``'s conversation (:attr:`messages_field`) as ``(role, text)`` pairs, each
        turn read by :meth:`read_turn`; a turn whose content is not text is refused (sent
        without it, it would ask another question)."""
        given = body.get(self.messages_field)
        if isinstance(given, str):  # a Responses input given as one string
            given = [self.user_turn(given)]
        turns: list[tuple[Any, str]] = []
        for item in given if isinstance(given, list) else []:
            if not isinstance(item, Mapping):
                raise ApiFeatureError("a conversation item that is not a message")
            role, content = self.read_turn(item)
            turns.append((role, text_of(content)))
        return turns

    def read_turn(self, turn: Mapping[str, Any]) -> tuple[Any, Any]:
        """A turn of the conversation as its role, named as Chat Completions names it, and
        its content: the shape :meth:`conversation`, :meth:`user_turn` and
        :meth:`partial_turn` write (``role`` and ``content``, unless the API overrides them)."""
        return turn.get("role"), turn.get("content")

    def declared_functions(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``body``'s tools as function declarations (``name``, ``parameters``, optional
        ``description``): what :meth:`function_tools` makes of them, read back."""
        if body.get("tools"):
            raise ApiFeatureError(f"the {self.title} API's tools cannot be read here")
        return []

    # ------------------------------------------------------------------ after a drop

    def continuation_body(
        self, body: Mapping[str, Any], text: str, flag: Mapping[str, object]
    ) -> dict[str, Any]:
        """The request that continues ``text`` (the partial answer) as a trailing assistant
        turn marked with ``flag``."""
        raise ApiFeatureError(f"the {self.title} API cannot continue a partial answer here")

    def instructed_continuation_body(self, body: Mapping[str, Any], text: str) -> dict[str, Any]:
        """The request that asks for the rest of ``text`` (the partial answer) where the API
        has no prefill: ``text`` as a finished assistant turn, then a user turn asking to go
        on from exactly where it stopped (:data:`CONTINUE_INSTRUCTION`).

        Weaker than a prefill, which makes the model's next token follow the text: an
        instructed model may rephrase, start the sentence again or add a preamble, and the
        caller's echo cut removes an exact overlap only. So it is used only where the API
        cannot be prefilled; a restart (a ``Reset``) would lose more: the text shown so far.
        """
        given = body.get(self.messages_field)
        if isinstance(given, str):  # a Responses input given as one string
            turns: list[Any] = [self.user_turn(given)]
        else:
            turns = list(given) if isinstance(given, list) else []
        turns += [self.partial_turn(text, {}), self.user_turn(CONTINUE_INSTRUCTION)]
        return {**body, self.messages_field: turns}

    def user_turn(self, text: str) -> dict[str, Any]:
        """A user turn of ``text`` in this API's shape."""
        return {"role": "user", "content": text}

    def partial_turn(self, text: str, flag: Mapping[str, object]) -> dict[str, Any]:
        """The trailing turn :meth:`continuation_body` appends for ``text`` (the API's own
        assistant turn; Gemini's is a ``model`` turn of ``parts``)."""
        return {"role": "assistant", "content": text, **flag}

    def turn_text(self, turn: Mapping[str, Any]) -> str | None:
        """The partial answer a trailing turn of :meth:`partial_turn`'s shape holds
        (``None``: the turn is not one)."""
        text = turn.get("content")
        return text if turn.get("role") == "assistant" and isinstance(text, str) else None

    # ------------------------------------------------------------------ on the wire

    def target(self, path: str, body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """The path (under the base URL) a request ``body`` is posted to, and the body as
        sent: :attr:`path` and ``body`` as they are, but for an API whose path names the
        model (Gemini's ``models/{model}:streamGenerateContent``)."""
        return path, body

    def replayable(self, body: Mapping[str, Any]) -> bool:
        """Whether the server keeps the response of ``body`` to be re-read after a drop."""
        return False

    def replay_path(self, response_id: str, sequence: int) -> str:
        """The ``GET`` path (query included) that streams a stored response's events after
        ``sequence``."""
        raise ApiFeatureError(f"the {self.title} API has no stored responses to re-read")

    # ------------------------------------------------------------------ where it lives

    def root_url(self, base_url: str) -> str:
        """``base_url`` as the API root this library joins :attr:`path` to (a vendor whose
        SDK names the host gets its version segment)."""
        return base_url


def text_of(content: Any) -> str:
    """A turn's content (a string, or a list of parts that hold ``text``) as its text; a part
    that is not text is refused."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
            else:
                kind = (part.get("type") or next(iter(part), "empty")
                        if isinstance(part, Mapping) else type(part).__name__)
                raise ApiFeatureError(f"a {kind!r} part cannot be sent to another API")
        return "".join(parts)
    raise ApiFeatureError(f"message content of type {type(content).__name__} is not text")


def object_tools(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``body``'s tools that are objects (anything else declares no function)."""
    return [tool for tool in body.get("tools") or [] if isinstance(tool, Mapping)]


def read_function(spec: Mapping[str, Any], *schema_fields: str) -> dict[str, Any]:
    """The function ``spec`` declares (``name``, ``parameters`` from the first of
    ``schema_fields`` it has, optional ``description``); a tool that names no function is
    refused, never carried as something else."""
    name = spec.get("name")
    if not isinstance(name, str):
        raise ApiFeatureError("a tool that is not a named function cannot be translated")
    params = next((spec[field] for field in schema_fields if field in spec), None)
    entry: dict[str, Any] = {"name": name, "parameters": params or {"type": "object"}}
    if isinstance(spec.get("description"), str):
        entry["description"] = spec["description"]
    return entry


def described(tool: dict[str, Any], function: Mapping[str, Any]) -> dict[str, Any]:
    """``tool`` with the description of ``function`` (a declaration), when it has one: the
    model chooses a tool by it."""
    description = function.get("description")
    return {**tool, "description": description} if description else tool


def messages_continuation(
    body: Mapping[str, Any], text: str, flag: Mapping[str, object]
) -> dict[str, Any]:
    """A continuation appended to ``messages`` (Chat Completions, Anthropic Messages)."""
    turn = {"role": "assistant", "content": text, **flag}
    return {**body, "messages": [*list(body.get("messages") or []), turn]}


def quoted(value: str) -> str:
    """``value`` as one path segment: an id from a server cannot add a path or a query."""
    return quote(value, safe="")
