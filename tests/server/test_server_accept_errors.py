"""Running out of file descriptors must not stop the embedded server.

``anyio``'s ``Listener.serve`` lets an ``accept`` error out of its loop, so one ``EMFILE`` (a
client that opens connections until the process has no descriptor left) ended the server's
task group: every open connection was cancelled and the port closed for good. The check runs
in a child process, since it lowers the process's descriptor limit.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import resource, socket, time
    import httpx
    from fluxstream.server import ServerThread

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with ServerThread() as server:
        resource.setrlimit(resource.RLIMIT_NOFILE, (96, hard))
        held = []
        try:
            for _ in range(200):
                held.append(socket.create_connection(("127.0.0.1", server.port), timeout=2))
        except OSError:
            pass
        time.sleep(0.5)  # the server meets EMFILE accepting what is queued
        for s in held:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        time.sleep(0.3)
        body = {"model": "m", "messages": [{"role": "user", "content": "still there?"}]}
        response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
        print("status", response.status_code, "held", len(held))
    """
)


def test_the_server_keeps_accepting_after_running_out_of_descriptors() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert "status 200" in result.stdout, (result.stdout, result.stderr[-2000:])
