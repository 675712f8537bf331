"""An embedded OpenAI-compatible streaming server with quirk profiles and fault injection.

It is the default target of the ``fluxstream serve``/``demo`` commands and of the test-suite: a
real HTTP/1.1 server on 127.0.0.1 whose replies are deterministic (see
:func:`~fluxstream.server.script.expected_reply`), whose wire format can imitate the quirks of
other providers (:mod:`~fluxstream.server.profiles`), whose transport can misbehave on demand
(:mod:`~fluxstream.server.faults`), and which records every request and client disconnect
(:mod:`~fluxstream.server.records`) so that cancellation is provable from the other end.
Besides Chat Completions (``/v1/chat/completions``) it speaks OpenAI's Responses API
(``/v1/responses``, with ``background`` responses resumable by ``GET /v1/responses/{id}?
stream=true&starting_after=N``), Anthropic Messages (``/v1/messages``) and Gemini
(``/v1beta/models/{model}:streamGenerateContent?alt=sse``): the same scripted content
(:mod:`~fluxstream.server.dialects` translates the Responses and Messages requests,
:mod:`~fluxstream.server.render_gemini` Gemini's), rendered per format by
:mod:`~fluxstream.server.render_responses`, :mod:`~fluxstream.server.render_messages` and
:mod:`~fluxstream.server.render_gemini`. Each API is one entry of
:data:`~fluxstream.server.dialect_table.DIALECTS`, named by the API's one name
(``chat_completions``, ``responses``, ``anthropic_messages``, ``gemini``).
It also honours assistant-prefix continuation (a last message ``{"role": "assistant",
"content": P, "prefix": true}`` gets only the rest of the reply after ``P``; see
:mod:`~fluxstream.server.script`), which clients use to resume a broken stream.

::

    async with fluxstream.server.serve(port=0, profile="openai") as server:
        ...  # point a client at server.base_url
        record = await server.wait_disconnect(timeout=1.0)
"""

from __future__ import annotations

from .app import (
    ATTEMPT_HEADER,
    CONTINUATION_HEADER,
    FAULT_HEADER,
    MODELS,
    PROFILE_HEADER,
    Server,
    serve,
)
from .dialect_table import script_for
from .dialects import from_messages, from_responses
from .faults import FAULT_KEYS, FaultError, Faults, build_faults, parse_fault_spec
from .profiles import PROFILE_DESCRIPTIONS, PROFILE_NAMES, ProfileError, parse_profiles
from .records import DisconnectRecord, Records, RequestRecord, ResponseRecord
from .runner import ServerThread, run, run_forever
from .script import (
    ExpectedChoice,
    ExpectedReply,
    ExpectedToolCall,
    build_script,
    continuation_prefix,
    expected_reply,
    strip_prefix,
)

__all__ = [
    "ATTEMPT_HEADER",
    "CONTINUATION_HEADER",
    "FAULT_HEADER",
    "FAULT_KEYS",
    "MODELS",
    "PROFILE_DESCRIPTIONS",
    "PROFILE_HEADER",
    "PROFILE_NAMES",
    "DisconnectRecord",
    "ExpectedChoice",
    "ExpectedReply",
    "ExpectedToolCall",
    "FaultError",
    "Faults",
    "ProfileError",
    "Records",
    "RequestRecord",
    "ResponseRecord",
    "Server",
    "ServerThread",
    "build_faults",
    "build_script",
    "continuation_prefix",
    "expected_reply",
    "from_messages",
    "from_responses",
    "parse_fault_spec",
    "parse_profiles",
    "run",
    "run_forever",
    "script_for",
    "serve",
    "strip_prefix",
]
