"""Registry benchmark (not a test): idle RSS with three registered, unloaded
models; RSS, threads and descriptors over 20 load/unload cycles through the
simulator's cdylib (`rkllm_destroy` per `rkllm_init` from its call record);
the daemon's own cost of switching models.

    .venv/bin/python tests/python/registry_bench.py target/release/rkllmd target/release/librkllm_sim.so [RUNS]

Prints one JSON object per run and the medians.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def proc(pid: int, key: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{key}:\s+(\d+)", text, re.M).group(1))


def start(binary: str, args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("RKLLMD_", "RKLLM_SIM_"))}
    child_env.update(env)
    p = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0", *args], stderr=subprocess.PIPE, env=child_env, text=True)
    for line in p.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            # Keep draining the log so the daemon never blocks on a full pipe.
            import threading

            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)
    raise SystemExit("the daemon did not start")


def one_run(binary: str, lib: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        for name in ("m1", "m2", "m3"):
            (models / f"{name}.rkllm").write_bytes(b"weights")
        record = Path(tmp) / "calls.jsonl"
        env = {"RKLLM_SIM_PROFILE": "instant", "RKLLM_SIM_REPLY_TOKENS": "4", "RKLLM_SIM_RECORD": str(record)}
        args = ["--backend", "rkllm", "--lib", lib, "--models-dir", str(models), "--max-loaded-models", "1", "--template", "chatml"]
        p, url = start(binary, args, env)
        try:
            http = httpx.Client(base_url=url, timeout=30)
            time.sleep(0.5)  # let the start settle before reading the idle RSS (a measurement, not synchronisation)
            idle_kib = proc(p.pid, "VmRSS")
            rss, threads, fds = [], [], []
            for _ in range(20):
                assert http.post("/v1/models/m1/load").json()["state"] == "loaded"
                assert http.post("/api/chat", json={"model": "m1", "stream": False, "messages": [{"role": "user", "content": "hi"}]}).status_code == 200
                assert http.post("/v1/models/m1/unload").json()["state"] == "unloaded"
                rss.append(proc(p.pid, "VmRSS"))
                threads.append(proc(p.pid, "Threads"))
                fds.append(len(os.listdir(f"/proc/{p.pid}/fd")))
            calls = [json.loads(l)["call"] for l in record.read_text().splitlines()]
            chat = lambda m: {"model": m, "stream": False, "messages": [{"role": "user", "content": "hi"}]}
            warm, switch, load_ns = [], [], []
            for i in range(20):
                model = "m2" if i % 2 == 0 else "m3"
                t0 = time.perf_counter()
                r = http.post("/api/chat", json=chat(model)).json()
                switch.append((time.perf_counter() - t0) * 1000)
                load_ns.append(r["load_duration"])
                t0 = time.perf_counter()
                http.post("/api/chat", json=chat(model)).json()
                warm.append((time.perf_counter() - t0) * 1000)
            return {
                "idle_rss_mib": idle_kib / 1024,
                "cycle1_rss_mib": rss[0] / 1024,
                "cycle20_rss_mib": rss[-1] / 1024,
                "threads_1_20": [threads[0], threads[-1]],
                "fds_1_20": [fds[0], fds[-1]],
                "init": calls.count("init"),
                "destroy": calls.count("destroy"),
                "switch_ms": statistics.median(switch),
                "warm_ms": statistics.median(warm),
                "switch_load_ms": statistics.median(load_ns) / 1e6,
            }
        finally:
            p.terminate()
            p.wait(10)


def main() -> None:
    binary, lib = sys.argv[1], sys.argv[2]
    runs = [one_run(binary, lib) for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5)]
    for r in runs:
        print(json.dumps(r))
    keys = [k for k, v in runs[0].items() if isinstance(v, float)]
    print("medians:", json.dumps({k: round(statistics.median(r[k] for r in runs), 3) for k in keys}))


if __name__ == "__main__":
    main()
