"""The I/O layer under :class:`~fluxstream._stream.ReplyStream`: private, imported lazily.

One request and its response (``attempt``), the loop over attempts and the reads (``channel``),
what each resume strategy sends after a drop (``reconnect``), how a stream ends and who stopped
it (``stream_end``), the reader that enforces the deadlines and acts on the decisions of
:mod:`fluxstream._core.recovery` (``reader``), the move to the next upstream before or after
content started (``failover``) and the next upstream asked too when the first token is slow
(``hedge``: a racer read until content, ``hedge_reading``; how each racer ends,
``hedge_racers``; the race on asyncio under a timer, ``hedge_timer``), the body read in a task
of its own for ``text(coalesce=)`` (``readahead``, on
``tasks``), the stream's structured output (``stream_objects``, ``structured_output``), the one
generic endpoint every API's requests go through (``endpoint``) and what it is handed: the
client's configuration as one frozen value (``client_settings``) and a call's options as one
(``call_options``); how requests to one base URL are built (``request_builder``, from the URL
taken apart once, ``base_url``) and a client's deadlines made one ``Timeouts``
(``client_timeouts``); the seam to an HTTP library (``transport``: what a client and a response
must have, and the capabilities a transport may declare), the HTTP clients fluxstream creates
(``default_client``, ``aiohttp_client``, with ``aiohttp_errors`` and the fence around aiohttp's
internals, ``aiohttp_private``) and what it needs to know about any HTTP library's errors
(``http_library``). The public face over all of it is :mod:`fluxstream._stream` and
:mod:`fluxstream._client`; nothing here is imported by the sans-IO core.
"""
