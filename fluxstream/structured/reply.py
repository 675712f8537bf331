"""A finished :class:`~fluxstream._reply.Reply` read as structured output.

The reply already says everything needed: the text, a refusal, the finish reason and how the
stream ended; a reply cut by the token limit or by the network yields its last partial object
marked incomplete, never a silent half object. The functions are defined beside the reply model
(:mod:`fluxstream._reply`), because :meth:`~fluxstream._reply.Reply.parse` runs them and the reply
must not import this package; their public home is :mod:`fluxstream.structured`.
"""

from __future__ import annotations

from .._reply import TRUNCATING_STOPS, parse_reply, parse_tool_call

__all__ = ["TRUNCATING_STOPS", "parse_reply", "parse_tool_call"]
