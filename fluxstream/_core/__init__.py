"""The private sans-IO decisions under a stream: no sockets, no clocks of their own.

``recovery`` decides retry, resume, hand off or end, whatever went wrong (a ``Failure`` in, a
``Decision`` out), and ``length_budget`` counts what a reply has used of its length cap (what
every continuation asks for); ``progress`` keeps a stream's clocks and says what is overdue;
``resume_check`` verifies a reconnect before it is trusted and ``reread`` runs the checks a new
connection's first events pass; ``resume_token`` is the one home of a resume token's shape (its
version, how the stream writes one, and how one from outside is read back into exactly the
shape written) and ``token_signature`` signs and verifies one (HMAC, for tokens that pass
through untrusted hands); ``failover`` holds the pure rules of moving on (which failures
another upstream may not share, a handoff's reason, a segment's kind) and the circuit breaker
that skips a failing upstream for a while, and ``error_hold`` the error event a read brought,
held back from the reply while another upstream could take it over; ``headers`` says which
header names carry a credential and checks headers without showing a value, and ``secret``
holds a secret (a key, a URL's credentials, a token secret) that never shows itself;
``coalesce`` paces items per frame; ``observers`` tells a stream's observers, once each,
whatever one of them raises; ``genai_attributes`` reads what the OpenTelemetry GenAI
conventions want of a request and a reply. The I/O layer (:mod:`fluxstream._io`) acts on what
they decide, so each is tested as a table, without I/O.

Below the public vocabulary sit the pieces the reply model itself needs, so that it imports
nothing above it: ``base_errors`` (the root error and the two errors reading content raises;
their home is :mod:`fluxstream.errors`), ``partial_objects`` and ``object_shapes`` (the
structured-output engine ``Reply.parse`` runs; its home is :mod:`fluxstream.structured`) and
``type_names`` (the name a type goes by at the API). Below :mod:`fluxstream.sse` sit the
decoder's event, ``sse_event`` (its home is :mod:`fluxstream.sse`), and its run shortcuts,
``sse_runs``. Beside the parser sit what it uses but is not parsing: ``echo``, what a
continuation's echo is and how it is cut, ``carried``, the counts and SSE state of the decoders
and wire formats a parser replaced, ``stream_position``, where a parser's stream stands as a
resume needs it, ``stream_moves``, its moves between connections and upstreams (the parser
inherits both), and ``think_tags``, which splits reasoning a server sends inside the text
between tags out of it. ``rate_limits`` reads what a response's
headers say (rate limits, retry advice, the request id), only when asked. Under everything
sit ``deprecation`` (a warning attributed to the user's line), ``moved_modules`` (the paths
0.1 made public that are private now, still importing, with that warning) and ``extras`` (an
optional dependency's import, which names the extra to install when it is missing).
"""
