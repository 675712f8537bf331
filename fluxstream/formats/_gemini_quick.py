"""The typed shape of the usual Gemini event, for the fast path of
:meth:`fluxstream.formats.gemini.GeminiFormat.feed_many`.

Nearly every event of a Gemini stream is one candidate whose parts are text (or one
``partialArgs`` piece extending the string argument being streamed), with the usage snapshot,
``modelVersion`` and ``responseId`` that ride on every event. :data:`QUICK_DECODER` decodes
such a frame straight into these structs: no dict is built, the candidate's other fields
(``safetyRatings``, ``citationMetadata`` ...) are skipped unread, and ``usageMetadata`` is
a typed :class:`QuickUsage`, compared with the last one without building a dict.

Every field the general path reads is declared, with the types it takes; everything it does
not read and that may carry meaning (a part of another kind, a top-level ``error`` or
``promptFeedback``) is refused, as is a value of another type (``forbid_unknown_fields`` where
an unknown key means another kind). Whatever the decoder refuses goes to the general path, and
so does whatever it decodes that the fast path declines: the decode only chooses the path, it
never decides what an event means.

Taken by :meth:`~fluxstream.formats.gemini.GeminiFormat.feed_many` for a frame that is an
object, not big, unable to nest deeper than ``from_json`` allows, while no surrogate half is
held and the stream is not done; falls back to the msgspec dict path (``_response``) or to
``feed`` for anything refused or declined. Held equal to the general path (no quick decoder)
by ``tests/formats/test_gemini_quick.py::test_built_streams_map_alike`` and
``::test_a_resumed_stream_maps_alike``, and on every recorded stream by
``tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw, UnsetType

__all__ = ["DICT_DECODER", "NO_USAGE", "QUICK_DECODER", "QuickCall", "QuickCandidate",
           "QuickContent", "QuickDetail", "QuickPart", "QuickPiece", "QuickResponse", "QuickUsage"]

# gc=False: these structs hold only strings, numbers, raw JSON and lists of one another, so
# they never make a reference cycle, and not tracking them makes building and freeing them
# cheaper.


class QuickPiece(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One ``partialArgs`` piece (the fast path takes a ``stringValue`` that continues)."""

    jsonPath: str | UnsetType = UNSET
    stringValue: str | UnsetType = UNSET
    willContinue: bool | UnsetType = UNSET
    numberValue: Raw | UnsetType = UNSET
    boolValue: Raw | UnsetType = UNSET
    nullValue: Raw | UnsetType = UNSET


class QuickCall(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A ``functionCall`` part's value (the fast path takes a call's next piece)."""

    name: str | UnsetType | None = UNSET
    id: str | UnsetType | None = UNSET
    args: Raw | UnsetType = UNSET
    willContinue: bool | UnsetType = UNSET
    partialArgs: list[QuickPiece] | UnsetType = UNSET


class QuickPart(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A part: text (``thought``: reasoning), or a function call; another kind is refused."""

    text: str | UnsetType = UNSET
    thought: bool | UnsetType = UNSET
    thoughtSignature: Raw | UnsetType = UNSET
    functionCall: QuickCall | UnsetType = UNSET


class QuickContent(msgspec.Struct, gc=False):
    parts: list[QuickPart] | UnsetType = UNSET


class QuickCandidate(msgspec.Struct, gc=False):
    content: QuickContent | UnsetType = UNSET
    index: int = 0
    finishReason: str | UnsetType | None = UNSET


class QuickDetail(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One entry of a ``...TokensDetails`` list (proto3 JSON leaves a zero count out)."""

    modality: str | UnsetType = UNSET
    tokenCount: int | UnsetType = UNSET


class QuickUsage(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """``usageMetadata``: every field of Google's ``UsageMetadata``, with its type. Two of
    these are equal exactly when the two JSON objects decode to equal dicts (the same keys,
    equal values: an ``int`` field takes neither a float nor a bool, and a key left out stays
    :data:`~msgspec.UNSET`), so comparing them tells whether the snapshot changed without
    building its dict (:class:`~fluxstream.formats.gemini.GeminiFormat` builds that only
    when it is read). A field not listed here sends the event to the general path."""

    promptTokenCount: int | UnsetType = UNSET
    candidatesTokenCount: int | UnsetType = UNSET
    totalTokenCount: int | UnsetType = UNSET
    thoughtsTokenCount: int | UnsetType = UNSET
    cachedContentTokenCount: int | UnsetType = UNSET
    toolUsePromptTokenCount: int | UnsetType = UNSET
    promptTokensDetails: list[QuickDetail] | UnsetType = UNSET
    candidatesTokensDetails: list[QuickDetail] | UnsetType = UNSET
    cacheTokensDetails: list[QuickDetail] | UnsetType = UNSET
    toolUsePromptTokensDetails: list[QuickDetail] | UnsetType = UNSET
    trafficType: str | UnsetType = UNSET


#: ``{}``: a snapshot with nothing in it (the general path ignores it).
NO_USAGE = QuickUsage()


class QuickResponse(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A ``GenerateContentResponse`` with none of the keys that end, fail or block a stream."""

    candidates: list[QuickCandidate] | UnsetType = UNSET
    usageMetadata: QuickUsage | UnsetType | None = UNSET
    modelVersion: str | UnsetType | None = UNSET
    responseId: str | UnsetType | None = UNSET
    createTime: Raw | UnsetType = UNSET


#: Decodes a frame into a :class:`QuickResponse` (a :class:`msgspec.DecodeError`, a
#: ``ValueError``, for anything else).
QUICK_DECODER: msgspec.json.Decoder[QuickResponse] = msgspec.json.Decoder(QuickResponse)

#: Decodes a frame into dicts and lists, the values ``from_json`` makes whenever it succeeds
#: (faster than it): the general path of ``feed_many`` for a frame the typed decoder refused
#: or the fast path declined, and the dict of a usage snapshot the fast path kept as its frame.
DICT_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
