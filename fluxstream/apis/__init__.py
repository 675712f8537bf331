"""The provider APIs fluxstream speaks, one registered :class:`Api` each (sans-IO).

Everything that differs between APIs (wire format, path, authentication, retryable statuses,
structured output and tools, continuation, re-reading a stored response) is asked of the
registered ``Api`` by its one name, the name its wire format, the CLI's ``--format``, resume
tokens, the embedded server's dialects and the fixtures share. An unknown name is an error
that lists the known ones, never another API's behaviour.

Adding an API: its wire format (``fluxstream/formats/<name>.py``, in ``FORMATS``), its ``Api``
(``fluxstream/apis/<name>.py``, listed in ``_registry.py``), its typed signature on the client,
and its dialect in the embedded server. Nothing outside ``fluxstream/apis/`` tells APIs apart
by name (``tests/apis/test_api_names.py``): what differs is an ``Api`` member.
"""

from __future__ import annotations

from ._registry import for_token, get, names, registered
from .api import CONTINUE_INSTRUCTION, Api, ApiFeatureError, Structured, UnknownApiError, bearer

__all__ = [
    "CONTINUE_INSTRUCTION",
    "Api",
    "ApiFeatureError",
    "Structured",
    "UnknownApiError",
    "bearer",
    "for_token",
    "get",
    "names",
    "registered",
]
