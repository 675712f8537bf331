"""The private sans-IO decisions under a stream: no sockets, no clocks of their own.

``recovery`` decides retry, resume or give up (state in, decision out); ``progress`` keeps a
stream's clocks and says what is overdue; ``resume_check`` verifies a reconnect before it is
trusted; ``coalesce`` paces items per frame. The I/O layer (:mod:`fluxstream._io`) acts on
what they decide, so each is tested as a table, without I/O.
"""
