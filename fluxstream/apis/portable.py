"""A request of one API asked of another: what failover to an upstream of another API sends.

Only what means the same in every API is carried: the conversation as text turns, the system
prompt, the length cap, function tools, and the sampling settings every API shares (each
API's :attr:`~fluxstream.apis.Api.sampling_names`: temperature, top-p, stop sequences where the
target has them — the Responses API has none, so they are not sent there). Anything else of
the source body (a provider's own options, images, cached prompt blocks) has no meaning
elsewhere and is left out; a turn whose content is not text is refused
(:class:`ApiFeatureError`), since sending it without its content would ask another question.
Reasoning is never carried: one provider's thinking is neither readable nor valid input to
another (Anthropic signs it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .api import Api, ApiFeatureError

__all__ = ["convert_body"]


def convert_body(body: Mapping[str, Any], source: Api, target: Api) -> dict[str, Any]:
    """``body`` (a request of ``source``) as a request of ``target``, without ``stream``.

    Each API reads and writes its own shapes (:meth:`~fluxstream.apis.Api.system_of`,
    :meth:`~fluxstream.apis.Api.text_turns`, :meth:`~fluxstream.apis.Api.declared_functions`;
    :meth:`~fluxstream.apis.Api.put_system`, :meth:`~fluxstream.apis.Api.function_tools`);
    what one has not said is refused (:class:`ApiFeatureError`), never given another's shape.
    """
    if source is target:
        return {k: v for k, v in body.items() if k != "stream"}
    system, turns = _turns(body, source)
    messages: list[dict[str, Any]] = []
    settings = source.request_settings(body)
    fields: dict[str, Any] = target.sampling({
        shared: settings[own] for shared, own in source.sampling_names.items() if own in settings
    })
    if system:
        target.put_system(fields, messages, system)
    messages += turns
    limit = source.length_cap(body)
    if limit is not None:
        fields[target.max_tokens_field] = limit
    tools = source.declared_functions(body)
    if tools:
        target.add_tools(fields, target.function_tools(tools))
    model = body.get("model")
    return target.conversation(model if isinstance(model, str) else "", messages, fields)


def _turns(body: Mapping[str, Any], source: Api) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt (the API's own, then its system turns) and the user/assistant turns
    of ``body``, as text."""
    system_parts = [source.system_of(body)]
    turns: list[dict[str, Any]] = []
    for role, text in source.text_turns(body):
        if role in ("system", "developer"):
            system_parts.append(text)
        elif role in ("user", "assistant"):
            turns.append({"role": role, "content": text})
        else:
            raise ApiFeatureError(f"a {role!r} turn cannot be sent to another API")
    return "\n\n".join(p for p in system_parts if p), turns
