"""What a Gemini candidate's parts become, for :class:`~fluxstream.formats.gemini.GeminiFormat`.

A ``GenerateContentResponse`` carries its content in ``candidates[]``; everything else in it
(errors, a blocked prompt, the usage snapshot, the stream's end) is the format's own. Kept
apart because a candidate is a state of its own: per candidate, the code points delivered per
channel, the finish reason, the function calls (whole, or streamed as ``partialArgs`` pieces)
and the surrogate halves held back; and because its mapping is the one the fast path of
``feed_many`` must agree with, the two sit side by side here (:meth:`CandidateReader._candidate`
and :meth:`CandidateReader._quick_parts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import UNSET

from .._events import Event, ReasoningBlock, ToolCallDelta
from .._limits import StreamLimits
from .._reply import StopReason
from ..errors import LimitExceededError
from ._base import MAX_KEPT_CHARS, FormatBase, compact
from ._event_makers import finish_event, reasoning_delta, text_delta, tool_delta
from ._gemini_args import NO_VALUE, PartialArgs, piece_value
from ._gemini_quick import QuickPart
from ._surrogates import REPLACEMENT, clean_tree, fix_surrogates, is_high_half

__all__ = ["MAX_INDEX", "STOPS", "Call", "Candidate", "CandidateReader", "count", "opt_str"]

#: Candidate indices are counts below this (as resume tokens carry them).
MAX_INDEX = 2**53

#: ``finishReason`` -> the unified :data:`~fluxstream._reply.StopReason`. Unknown reasons are
#: kept raw and read ``other``.
STOPS: dict[str, StopReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "MALFORMED_RESPONSE": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "OTHER": "other",
    "FINISH_REASON_UNSPECIFIED": "other",
    "LANGUAGE": "other",
    "IMAGE_OTHER": "other",
    "NO_IMAGE": "other",
}
#: Part kinds that carry nothing for the reply (Google ran the code itself; media are not text).
_SKIPPED_PARTS = ("executableCode", "codeExecutionResult", "inlineData", "fileData",
                  "functionResponse", "toolCall", "toolResponse")
#: Keys a part may carry beside its content (never a reason to skip it).
_PART_EXTRAS = frozenset({"thought", "thoughtSignature", "partMetadata", "videoMetadata",
                          "mediaResolution"})


def count(value: object) -> int | None:
    """A count: a plain non-negative ``int`` (not ``bool``, not a string), else ``None``."""
    if type(value) is int and 0 <= value < MAX_INDEX:
        return value
    return None


def opt_str(value: object) -> str | None:
    """A wire value read as text (a finish or block reason, an error's code or status, which
    proto3 JSON may send as a number): ``None`` stays ``None``."""
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


class Call:
    """One tool call: identity, delivered length and, while Vertex streams its arguments,
    the pieces' value and text."""

    __slots__ = ("id", "length", "name", "pieces")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.length = 0
        self.pieces: PartialArgs | None = None


class Candidate:
    """Per-candidate offsets (code points delivered per channel), finish reason, calls."""

    __slots__ = ("calls", "finish", "held", "open", "reasoning", "signatures", "text")

    def __init__(self) -> None:
        self.text = 0
        self.reasoning = 0
        self.finish: str | None = None
        self.calls: dict[int, Call] = {}
        #: The call whose arguments are being streamed (``willContinue``), if any.
        self.open: int | None = None
        self.signatures = 0
        #: High surrogate halves held back per channel ("text", "reasoning").
        self.held: dict[str, str] | None = None


class CandidateReader(FormatBase):
    """What a candidate's parts become: text, reasoning, kept signatures, whole and streamed
    function calls, finish reasons, with the per-candidate offsets and surrogate halves.
    :class:`~fluxstream.formats._gemini_usage.UsageSnapshot` adds the usage snapshot, and
    :class:`~fluxstream.formats.gemini.GeminiFormat` the frames, the stream's errors and end."""

    __slots__ = ("_cands", "_holding", "_kept", "_settled")

    def __init__(self, key: str, strict: bool, limits: StreamLimits) -> None:
        super().__init__(key, strict=strict, limits=limits)
        self._cands: dict[int, Candidate] = {}
        #: Surrogate halves held over all candidates: while any is, every fragment is checked.
        self._holding = 0
        #: Characters of never-shown data kept (thought signatures), see MAX_KEPT_CHARS.
        self._kept = 0
        #: A candidate finished in the event being read (its usage is the final one).
        self._settled = False

    # ------------------------------------------------------------------ candidates

    def _candidate(self, cand: dict[str, Any], scan: bool, out: list[Event]) -> None:
        index = cand.get("index", 0)
        if index.__class__ is not int or not 0 <= index < MAX_INDEX:
            out += self._skip(cand, f"candidate index {index!r} is not a count")
            return
        st = self._cands.get(index)
        if st is None:
            if len(self._cands) >= self.limits.max_choices:
                raise LimitExceededError("max_choices", self.limits.max_choices,
                                         len(self._cands) + 1)
            st = self._cands[index] = Candidate()
            self.new_choices.append(index)
        content = cand.get("content")
        if content.__class__ is dict:
            parts = content.get("parts")
            if parts.__class__ is list:
                key = self.key
                for part in parts:
                    if part.__class__ is not dict:
                        out += self._skip(part, "a part that is not an object")
                        continue
                    text = part.get("text")
                    if text.__class__ is str:
                        if not text:
                            pass
                        elif part.get("thought") is True:
                            if scan or st.held:
                                text = self._unpaired(st, "reasoning", text)
                            if text:
                                out.append(reasoning_delta(key, index, st.reasoning, text))
                                st.reasoning += len(text)
                        else:
                            if scan or st.held:
                                text = self._unpaired(st, "text", text)
                            if text:
                                out.append(text_delta(key, index, st.text, text))
                                st.text += len(text)
                    elif len(part) > 1 or "thoughtSignature" not in part:
                        self._other_part(index, st, part, scan, out)
                    signature = part.get("thoughtSignature")
                    if signature:
                        self._signature(index, st, part, signature, out)
            elif parts is not None:
                out += self._skip(cand, "parts is not a list")
        reason = cand.get("finishReason")
        if reason is not None and reason != st.finish:
            reason = opt_str(reason)
            if reason:
                self._finish(index, st, fix_surrogates(reason) if scan else reason, out)

    def _other_part(self, index: int, st: Candidate, part: dict[str, Any], scan: bool,
                    out: list[Event]) -> None:
        call = part.get("functionCall")
        if call is not None:
            if call.__class__ is dict:
                self._function_call(index, st, call, scan, out)
            else:
                out += self._skip(part, "functionCall is not an object")
            return
        for kind in _SKIPPED_PARTS:
            if kind in part:
                out += self._skip(part, f"a {kind} part (nothing for the reply)")
                return
        if not all(key in _PART_EXTRAS for key in part):
            out += self._skip(part, "a part of an unknown kind")

    def _signature(self, index: int, st: Candidate, part: dict[str, Any], signature: object,
                   out: list[Event]) -> None:
        """A ``thoughtSignature``: kept (a :class:`ReasoningBlock`), never shown; the next
        request must send it back with its part for the model to go on reasoning."""
        if not isinstance(signature, str):
            out += self._skip(part, "thoughtSignature is not a string")
            return
        if self._kept + len(signature) > MAX_KEPT_CHARS:
            out += self._skip(part, "kept reasoning data over the limit")
            return
        self._kept += len(signature)
        block: dict[str, Any] = {"type": "thought_signature",
                                 "thoughtSignature": fix_surrogates(signature)}
        call = part.get("functionCall")
        if isinstance(call, Mapping) and st.calls:
            block["call"] = max(st.calls) if st.open is None else st.open
        out.append(ReasoningBlock(self.key, index, st.signatures, block))
        st.signatures += 1

    def _finish(self, index: int, st: Candidate, reason: str, out: list[Event]) -> None:
        if st.open is not None:
            self._close_call(index, st, out)
        if st.held:
            self._flush(index, st, out)
        st.finish = reason
        self._settled = True
        stop = STOPS.get(reason, "other")
        if stop == "stop" and st.calls:
            stop = "tool_calls"  # Gemini says STOP when it stops to call functions
        out.append(finish_event(self.key, index, reason, stop))

    # ------------------------------------------------------------------ function calls

    def _function_call(self, index: int, st: Candidate, fc: dict[str, Any], scan: bool,
                       out: list[Event]) -> None:
        name = fc.get("name")
        name = (fix_surrogates(name) if scan else name) if name and isinstance(name, str) else None
        cid = fc.get("id")
        cid = (fix_surrogates(cid) if scan else cid) if cid and isinstance(cid, str) else None
        more = fc.get("willContinue") is True
        pieces = fc.get("partialArgs")
        args = fc.get("args")
        if scan and args is not None:
            args = clean_tree(args)
        if st.open is not None:
            if name is None:  # the next part of the call being streamed
                number = st.open
                self._streamed(index, number, st.calls[number], pieces, args, scan, out)
                if not more:
                    self._close_call(index, st, out)
                return
            self._close_call(index, st, out)  # a new call: the open one is over
        if name is None and cid is None and pieces is None and args is None:
            out += self._skip(fc, "a functionCall part of no call")
            return
        calls = st.calls
        if len(calls) >= self.limits.max_tool_calls:
            raise LimitExceededError("max_tool_calls", self.limits.max_tool_calls,
                                     len(calls) + 1)
        number = max(calls) + 1 if calls else 0
        call = calls[number] = Call()
        call.id, call.name = cid, name
        if more or pieces is not None:
            call.pieces = PartialArgs()
            st.open = number
            out.append(ToolCallDelta(self.key, index, number, cid, name, "", 0))
            self._streamed(index, number, call, pieces, args, scan, out)
            if not more:
                self._close_call(index, st, out)
            return
        text = "{}" if args is None else compact(args)
        out.append(tool_delta(self.key, index, number, cid, name, text, 0))
        call.length = len(text)

    def _streamed(self, index: int, number: int, call: Call, pieces: object, args: object,
                  scan: bool, out: list[Event]) -> None:
        """``partialArgs`` pieces (and any whole ``args``) of a call being streamed."""
        writer = call.pieces
        if writer is None:  # pragma: no cover - an open call always has its pieces
            writer = call.pieces = PartialArgs()
        if isinstance(args, Mapping) and args:
            writer.root.update(args)  # whole values beside streamed ones: rendered at close
            writer.ordered = False
        if pieces is None:
            return
        if pieces.__class__ is not list:
            out += self._skip({"partialArgs": pieces}, "partialArgs is not a list")
            return
        for piece in pieces:
            value, extend = piece_value(piece)
            steps = writer.steps(piece.get("jsonPath")) if piece.__class__ is dict else None
            if steps is None or value is NO_VALUE:
                out += self._skip(piece, "a partialArgs piece without a jsonPath and a value")
                continue
            if scan and isinstance(value, str):
                value = fix_surrogates(value)
            text = writer.put(steps, value, extend, piece.get("willContinue") is True)
            if text is None:
                out += self._skip(piece, "a partialArgs piece whose jsonPath does not fit")
            elif text:
                out.append(tool_delta(self.key, index, number, None, None, text, call.length))
                call.length += len(text)

    def _close_call(self, index: int, st: Candidate, out: list[Event]) -> None:
        number = st.open
        st.open = None
        if number is None:  # pragma: no cover - callers check
            return
        call = st.calls[number]
        writer, call.pieces = call.pieces, None
        if writer is None:
            return
        text = writer.close()
        if text:
            out.append(tool_delta(self.key, index, number, None, None, text, call.length))
            call.length += len(text)
        if not writer.ordered:
            final = writer.final()
            written = "".join(writer.written)
            same = 0
            for a, b in zip(written, final, strict=False):
                if a != b:
                    break
                same += 1
            out.append(ToolCallDelta(self.key, index, number, None, None, final[same:], same,
                                     replace=True))
            call.length = len(final)

    # ------------------------------------------------------------------ the fast path

    def _quick_parts(self, index: int, st: Candidate, parts: list[QuickPart],
                     out: list[Event]) -> bool:
        """A known candidate's parts as the fast path of ``feed_many`` reads them (text and
        thought text, or the next piece of the string argument being streamed), mapped as
        :meth:`_candidate` maps them; ``False``, nothing done, for any other."""
        if len(parts) == 1 and parts[0].functionCall is not UNSET:
            return self._quick_piece(index, st, parts[0], out)
        for part in parts:
            if (part.text.__class__ is not str or part.functionCall is not UNSET
                    or part.thoughtSignature is not UNSET):
                return False
        key = self.key
        for part in parts:
            text = part.text
            if not text:
                continue
            if part.thought is True:
                out.append(reasoning_delta(key, index, st.reasoning, text))
                st.reasoning += len(text)
            else:
                out.append(text_delta(key, index, st.text, text))
                st.text += len(text)
        return True

    def _quick_piece(self, index: int, st: Candidate, part: QuickPart,
                     out: list[Event]) -> bool:
        """The next piece of the string argument being streamed, and nothing else."""
        number = st.open
        fc = part.functionCall
        if (number is None or fc is UNSET or part.text is not UNSET or part.thought is not UNSET
                or part.thoughtSignature is not UNSET or fc.willContinue is not True
                or fc.name is not UNSET or fc.id is not UNSET or fc.args is not UNSET):
            return False
        pieces = fc.partialArgs
        if pieces is UNSET or len(pieces) != 1:
            return False
        piece = pieces[0]
        value, path = piece.stringValue, piece.jsonPath
        call = st.calls[number]
        writer = call.pieces
        if (writer is None or piece.willContinue is not True or value is UNSET or path is UNSET
                or piece.numberValue is not UNSET or piece.boolValue is not UNSET
                or piece.nullValue is not UNSET):
            return False
        text = writer.extend(path, value)
        if text is None:
            return False
        if text:
            out.append(tool_delta(self.key, index, number, None, None, text, call.length))
            call.length += len(text)
        return True

    # ------------------------------------------------------------------ surrogate halves

    def _unpaired(self, st: Candidate, channel: str, text: str) -> str:
        """``text`` ready to deliver: a held high half in front, a trailing one held back,
        pairs joined, any other lone half U+FFFD. May return ``""``."""
        held = st.held
        if held:
            before = held.pop(channel, "")
            if before:
                self._holding -= 1
                text = before + text
        last = text[-1:]
        if is_high_half(last):
            if held is None:
                held = st.held = {}
            held[channel] = last
            self._holding += 1
            text = text[:-1]
        return fix_surrogates(text)

    def _flush(self, index: int, st: Candidate, out: list[Event]) -> None:
        """Held high halves of a candidate that ends: U+FFFD (no low half will come)."""
        held = st.held or {}
        st.held = None
        for channel in held:
            self._holding -= 1
            if channel == "text":
                out.append(text_delta(self.key, index, st.text, REPLACEMENT))
                st.text += 1
            else:
                out.append(reasoning_delta(self.key, index, st.reasoning, REPLACEMENT))
                st.reasoning += 1

    def _flush_all(self, out: list[Event]) -> None:
        if self._holding:
            for index, st in self._cands.items():
                if st.held:
                    self._flush(index, st, out)

    # ------------------------------------------------------------------ skipped input

    def _skip(self, obj: object, reason: str) -> list[Event]:
        """Count something that cannot be used (never raised: the stream goes on)."""
        return self.skip(reason, obj)

    def _skip_text(self, text: str, reason: str) -> list[Event]:
        return self.skip(reason, text)
