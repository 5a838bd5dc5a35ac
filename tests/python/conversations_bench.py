"""Several concurrent conversations on one daemon (issue 21): each client
plays K turns, resending its history with the replies it was given; reports
the share of follow-ups that reused cached tokens, how the state was found
(timings.cache) and the server's TTFT (timings.ttft_ms) by turn.

    python conversations_bench.py URL MODEL --conversations 6 --turns 6 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import urllib.request


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def conversation(url: str, model: str, index: int, turns: int, max_tokens: int, out: list) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Conversation {index}, question {turn}: tell me about the NPU."})
        body = post(f"{url}/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": max_tokens})
        t = body["timings"]
        out.append((turn, t["ttft_ms"], t["cache_n"], t.get("cache"), body["usage"]["prompt_tokens"]))
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=32)
    a = p.parse_args()
    out: list = []
    threads = [
        threading.Thread(target=conversation, args=(a.url, a.model, i, a.turns, a.max_tokens, out))
        for i in range(a.conversations)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    follow = [r for r in out if r[0] > 0]
    hits = [r for r in follow if r[2] > 0]
    found = {k: sum(1 for r in follow if r[3] == k) for k in ("resident", "restored", "miss")}
    print(f"follow-ups cached: {len(hits)}/{len(follow)} ({100 * len(hits) / max(len(follow), 1):.0f} %); by cache: {found}")
    for turn in range(a.turns):
        rows = [r for r in out if r[0] == turn]
        share = statistics.median(r[2] / r[4] for r in rows)
        print(f"turn {turn + 1}: TTFT p50 {statistics.median(r[1] for r in rows):.0f} ms, cached share of prompt p50 {share:.2f}")


if __name__ == "__main__":
    main()
