"""A new agent session's first turn, shared prefix on against cache off, side by side.

    python3 tests/python/shared_prefix_bench.py BIN [TIME_SCALE] [SESSIONS]

Starts two daemons on the simulated Qwen2.5-1.5B converted for 16k
(`context_limit=16384`, board pace at TIME_SCALE 1): one with the defaults,
one with `--conversation-cache off`. Each gets the same SESSIONS first turns
(default 4) of a Codex-sized agent, one after another: the same system
prompt and tools (about 13.5k tokens), a different task each. Prints, per
session, the server's `timings.ttft_ms`, `cache`, `cached_tokens` and
`prompt_n` on both, and the ratio on/off. Only the standard library.
"""

import json
import re
import subprocess
import sys
import urllib.request

WORDS = (
    "read the repository files before changing them keep each change small run the tests that cover "
    "the change and report what they printed explain every command before running it"
).split()


def system_prompt(words):
    return " ".join(WORDS[i % len(WORDS)] for i in range(words))


def tools(n, words):
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": system_prompt(words),
                "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}},
            },
        }
        for i in range(n)
    ]


def start(binary, spec, extra):
    p = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", "0", "--model", spec, "--model-id", "m", *extra],
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return p, m.group(1)
    raise SystemExit("the daemon did not start")


def turn(url, messages, tool_list):
    body = {"model": "m", "messages": messages, "tools": tool_list, "max_tokens": 8}
    req = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main():
    binary = sys.argv[1]
    scale = sys.argv[2] if len(sys.argv) > 2 else "1"
    sessions = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    spec = f"sim:qwen2.5-1.5b?context_limit=16384&time_scale={scale}&reply_tokens=8"
    system, tool_list = system_prompt(6000), tools(6, 500)
    tasks = [
        "List the files in this directory and say which one builds the project.",
        "Why does the build fail? Read the log first.",
        "Add a test for the parser's error path.",
        "Rename the config option and update the docs.",
        "Find where the timeout is set and double it.",
        "Explain what the main function does.",
    ]
    rows = {}
    for name, extra in [("on", []), ("off", ["--conversation-cache", "off"])]:
        proc, url = start(binary, spec, extra)
        try:
            for i in range(sessions):
                messages = [{"role": "system", "content": system}, {"role": "user", "content": tasks[i % len(tasks)]}]
                body = turn(url, messages, tool_list)
                t, u = body["timings"], body["usage"]
                cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                rows.setdefault(i, {})[name] = (t["ttft_ms"], t["cache"], cached, t["prompt_n"], u["prompt_tokens"])
        finally:
            proc.terminate()
            proc.wait()
    print("| session | prompt tokens | on: TTFT | cache | cached | prompt_n | off: TTFT | on / off |")
    print("|---|---|---|---|---|---|---|---|")
    for i, r in sorted(rows.items()):
        on, off = r["on"], r["off"]
        print(
            f"| {i + 1} | {on[4]:,} | {on[0]:,.1f} ms | {on[1]} | {on[2]:,} | {on[3]:,} | {off[0]:,.1f} ms "
            f"| {on[0] / off[0]:.3f} |"
        )


if __name__ == "__main__":
    main()
