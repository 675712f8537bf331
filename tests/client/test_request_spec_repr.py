"""The request behind a stream never shows its headers in a repr.

``RequestSpec`` is a dataclass; its generated repr printed every field, the per-request headers
included (``extra_headers={"Authorization": "Bearer ..."}``, a gateway's token): anything that
formats locals (a debugger, an error tracker capturing frame variables, a log of ``channel``)
showed the token. README: the API key never appears in a repr.
"""

from __future__ import annotations

import fluxstream


def test_a_streams_request_spec_hides_the_headers() -> None:
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="sk-SECRET-KEY")
    stream = client.chat.stream(
        model="m", messages=[], extra_headers={"Authorization": "Bearer REQ-SECRET"}
    )
    spec = stream._reader.channel.spec
    assert spec.headers == {"Authorization": "Bearer REQ-SECRET"}  # still sent
    assert "SECRET" not in repr(spec)
    assert "SECRET" not in repr(stream) and "SECRET" not in repr(client)
