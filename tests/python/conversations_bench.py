"""Several concurrent conversations on one daemon (issue 21): each client
plays K turns, resending its history with the replies it was given; reports
the share of follow-ups that reused cached tokens, how the state was found
(timings.cache) and the server's TTFT (timings.ttft_ms) by turn.

    python conversations_bench.py URL MODEL --conversations 6 --turns 6 --max-tokens 32

Behind a front end (tests/python/boards_bench.sh): `--session-header` names
each conversation in `X-Session-Id` (what the affinity configs hash on),
`--think S` waits 0..S seconds (seeded) before each follow-up, as a user
reading the reply does, so that clients do not stay in lockstep, and
`--prefix P` changes the conversations' names (and so their hashes). The
board that answered (`X-Rkllmd-Instance`) is counted per conversation.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
import urllib.request


def post(url: str, body: dict, headers: dict) -> tuple[str | None, dict]:
    headers = {"Content-Type": "application/json", **headers}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.headers.get("x-rkllmd-instance"), json.load(r)


def conversation(a: argparse.Namespace, index: int, out: list) -> None:
    name = f"{a.prefix}conversation-{index}"
    headers = {"X-Session-Id": name} if a.session_header else {}
    rng = random.Random(name)
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(a.turns):
        if turn:
            time.sleep(rng.uniform(0, a.think))
        messages.append({"role": "user", "content": f"Conversation {index}, question {turn}: tell me about the NPU."})
        board, body = post(
            f"{a.url}/v1/chat/completions", {"model": a.model, "messages": messages, "max_tokens": a.max_tokens}, headers
        )
        t = body["timings"]
        out.append((turn, t["ttft_ms"], t["cache_n"], t.get("cache"), body["usage"]["prompt_tokens"], index, board))
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--session-header", action="store_true")
    p.add_argument("--think", type=float, default=0.0)
    p.add_argument("--prefix", default="")
    a = p.parse_args()
    out: list = []
    threads = [threading.Thread(target=conversation, args=(a, i, out)) for i in range(a.conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    follow = [r for r in out if r[0] > 0]
    hits = [r for r in follow if r[2] > 0]
    found = {k: sum(1 for r in follow if r[3] == k) for k in ("resident", "restored", "miss")}
    print(f"follow-ups cached: {len(hits)}/{len(follow)} ({100 * len(hits) / max(len(follow), 1):.0f} %); by cache: {found}")
    ttft = sorted(r[1] for r in follow)
    if ttft:
        print(f"follow-up TTFT p50 {statistics.median(ttft):.0f} ms, p90 {ttft[int(0.9 * len(ttft))]:.0f} ms")
    boards = [{r[6] for r in out if r[5] == i} for i in range(a.conversations)]
    if any(None not in b for b in boards):
        moved = sum(1 for b in boards if len(b) > 1)
        print(f"conversations answered by more than one board: {moved} of {a.conversations}")
    for turn in range(a.turns):
        rows = [r for r in out if r[0] == turn]
        share = statistics.median(r[2] / r[4] for r in rows)
        print(f"turn {turn + 1}: TTFT p50 {statistics.median(r[1] for r in rows):.0f} ms, cached share of prompt p50 {share:.2f}")


if __name__ == "__main__":
    main()
