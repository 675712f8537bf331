"""The private sans-IO decisions under a stream: no sockets, no clocks of their own.

``recovery`` decides retry, resume or give up (state in, decision out); ``progress`` keeps a
stream's clocks and says what is overdue; ``resume_check`` verifies a reconnect before it is
trusted; ``coalesce`` paces items per frame; ``observers`` tells a stream's observers, once
each, whatever one of them raises. The I/O layer (:mod:`fluxstream._io`) acts on
what they decide, so each is tested as a table, without I/O.

Below the public vocabulary sit the pieces the reply model itself needs, so that it imports
nothing above it: ``base_errors`` (the root error and the two errors reading content raises;
their home is :mod:`fluxstream.errors`), ``partial_objects`` and ``object_shapes`` (the
structured-output engine ``Reply.parse`` runs; its home is :mod:`fluxstream.structured`) and
``type_names`` (the name a type goes by at the API). Below :mod:`fluxstream.sse` sit the
decoder's event, ``sse_event`` (its home is :mod:`fluxstream.sse`), and its run shortcuts,
``sse_runs``.
"""
