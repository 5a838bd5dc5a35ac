"""Embedding benchmark (not a test): the daemon's RSS over 1,000 embedding
requests, and its time per request beside the runtime's own.

    .venv/bin/python tests/python/embed_bench.py target/release/rkllmd [REQUESTS] [PATH]

One fresh daemon on the in-process simulator's `instant` profile, one
keep-alive connection, one input per request (`PATH`: `/v1/embeddings`,
the default, or `/api/embed`). Per request:

* `client_ms`: the request's round trip as the client saw it;
* `e2e_ms`: received → `rkllm_run` returned (the timings log);
* `runtime_ms`: the runtime's own `prefill_time_ms` (the simulator measures its run);
* daemon, server side = `e2e_ms − runtime_ms` (leaves out reading the request before
  `received`, and pooling, serialising and writing the reply after `finished`);
* daemon, client side = `client_ms − runtime_ms − health_ms`, where `health_ms` is the
  median round trip of `GET /health/live` on the same connection (the HTTP and client
  floor); it holds everything the server side leaves out.

Prints one JSON object.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse


def rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+)", text, re.M).group(1))


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 4), "p90": round(pct(xs, 0.9), 4)}


def main() -> None:
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    path = sys.argv[3] if len(sys.argv) > 3 else "/v1/embeddings"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "timings.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RKLLMD_", "RKLLM_SIM_"))}
        args = [binary, "--host", "127.0.0.1", "--port", "0", "--backend", "sim", "--model", "sim:instant"]
        args += ["--model-id", "m", "--timings-log", str(log)]
        p = subprocess.Popen(args, stderr=subprocess.PIPE, env=env, text=True)
        try:
            url = None
            for line in p.stderr:
                m = re.search(r"listening on (http://[0-9.:]+)", line)
                if m:
                    url = m.group(1)
                    break
            if url is None:
                raise SystemExit("the daemon did not start")
            # Keep draining the log so the daemon never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            u = urlparse(url)
            conn = http.client.HTTPConnection(u.hostname, u.port)
            body = json.dumps({"model": "m", "input": "The cat sat on the mat"})
            headers = {"Content-Type": "application/json"}

            def one() -> float:
                t0 = time.perf_counter()
                conn.request("POST", path, body, headers)
                r = conn.getresponse()
                r.read()
                assert r.status == 200, r.status
                return (time.perf_counter() - t0) * 1000

            health = []
            for _ in range(200):
                t0 = time.perf_counter()
                conn.request("GET", "/health/live")
                conn.getresponse().read()
                health.append((time.perf_counter() - t0) * 1000)
            client = [one() for _ in range(10)]
            rss = [rss_kib(p.pid)]
            cpu0 = cpu_s(p.pid)
            for i in range(10, n):
                client.append(one())
                if (i + 1) % 100 == 0:
                    rss.append(rss_kib(p.pid))
            cpu = (cpu_s(p.pid) - cpu0) / (n - 10)
            deadline = time.monotonic() + 10
            while len(log.read_text().splitlines()) < n and time.monotonic() < deadline:
                time.sleep(0.05)  # the log's writer thread lags the replies (a measurement, not a test)
            lines = [json.loads(l) for l in log.read_text().splitlines()]
            assert len(lines) == n, len(lines)
            e2e = [l["timings"]["e2e_ms"] for l in lines]
            runtime = [l["timings"]["runtime"]["prefill_time_ms"] for l in lines]
            queue = [l["timings"]["queue_ms"] for l in lines]
            run = [l["run_ms"] for l in lines]
            h = statistics.median(health)
            print(
                json.dumps(
                    {
                        "path": path,
                        "requests": n,
                        "rss_kib_after_10": rss[0],
                        "rss_kib_every_100": rss[1:],
                        "rss_growth_kib": rss[-1] - rss[0],
                        "client_ms": summary(client),
                        "health_ms": summary(health),
                        "e2e_ms": summary(e2e),
                        "queue_ms": summary(queue),
                        "run_ms": summary(run),
                        "runtime_ms": summary(runtime),
                        "daemon_server_side_ms": summary([e - r for e, r in zip(e2e, runtime)]),
                        "daemon_client_side_ms": summary([c - r - h for c, r in zip(client, runtime)]),
                        "daemon_cpu_ms_per_request": round(cpu * 1000, 4),
                    },
                    indent=1,
                )
            )
        finally:
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    main()
