"""Where a request ends, read the one way every parser reads it, or refused (sans-IO).

h11 parses the request; this module refuses, before it is served, a head that two HTTP
parsers could frame two ways, because this server sits behind users' own proxies and a
disagreement about where a request ends is request smuggling: a proxy that goes by
``Content-Length`` forwards the bytes after a chunked body inside one request, a server that
goes by ``Transfer-Encoding`` (h11, as RFC 9112 allows) answers them as a second one.
RFC 9112 is followed at its strict end:

* ``Content-Length`` and ``Transfer-Encoding`` together: 400 and close (section 6.1 allows
  serving by ``Transfer-Encoding`` but then closing; refusing is the answer no proxy can
  misread);
* a ``Transfer-Encoding`` whose last coding is not ``chunked`` (or empty, or ``chunked``
  twice): 400 and close (section 6.3); ``chunked`` last after another coding: 501, a coding
  this server does not decode (section 6.1);
* ``Content-Length`` values that differ (repeated headers or a list): 400 (section 6.3);
* a header line folded onto the next (obs-fold): 400 (section 5.2 allows unfolding, as h11
  does, but a proxy that does not unfold reads another header: the folded line may itself
  be ``Transfer-Encoding``).

The head is read as raw bytes, not from h11's parsed headers: h11 has already unfolded
obs-fold and refused some shapes with its own status by then.
"""

from __future__ import annotations

import re

__all__ = ["framing_problem"]

#: The blank line ending a head, as h11 finds it (a bare LF is accepted there too).
_HEAD_END = re.compile(rb"\n\r?\n")


def framing_problem(head: bytes | bytearray) -> tuple[int, str] | None:
    """The status and message to refuse the request whose raw bytes start ``head`` with, or
    ``None`` when its framing reads one way (or its head is not complete in ``head``: h11
    refuses what it cannot parse)."""
    head = bytes(head).lstrip(b"\r\n")
    end = _HEAD_END.search(head)
    if end is None:
        return None
    lengths: set[bytes] = set()
    codings: list[bytes] | None = None
    for line in head[: end.start()].split(b"\n")[1:]:
        if line[:1] in (b" ", b"\t"):
            return 400, "a header line folded onto the next (obs-fold) is not accepted"
        name, _, value = line.rstrip(b"\r").partition(b":")
        name = name.lower()
        if name == b"content-length":
            lengths.update(part.strip() for part in value.split(b","))
        elif name == b"transfer-encoding":
            codings = (codings or []) + [
                part.strip().lower() for part in value.split(b",") if part.strip()
            ]
    if codings is None:
        if len(lengths) > 1:
            return 400, "conflicting Content-Length values"
        return None
    if lengths:
        return 400, "both Content-Length and Transfer-Encoding"
    if not codings or codings[-1] != b"chunked" or b"chunked" in codings[:-1]:
        return 400, "Transfer-Encoding does not end in chunked (once)"
    if len(codings) > 1:
        return 501, "only Transfer-Encoding: chunked is supported"
    return None
