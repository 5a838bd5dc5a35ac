# Reliability measurement (not a test; docs/reliability.md). usage: reliability_big_input.py BIN PORT [case] [n_parallel] [rounds]: peak RSS growth and time of a refusal by size (case: a path, or one of the named cases below); rounds (default 1) of n_parallel requests one after the other, on one daemon, then the median and worst time
import subprocess, sys, time, json, threading, urllib.request, statistics
bin, port = sys.argv[1], sys.argv[2]
path = sys.argv[3] if len(sys.argv) > 3 else "/v1/chat/completions"
n = int(sys.argv[4]) if len(sys.argv) > 4 else 1
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1
p = subprocess.Popen([bin, "--backend", "sim", "--model", "sim:instant", "--model-id", "m", "--port", port], stderr=subprocess.DEVNULL)
time.sleep(2.5)
def hwm():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith(("VmHWM", "VmRSS")): yield l.split()[1]
base = list(hwm())
text = "word " * (8_000_000 // 5)
user = [{"role": "user", "content": "hi"}]
tool = lambda i, description="": {"type": "function", "function": {"name": f"f{i}", "description": description}}
bodies = {"/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": text}]},
          "/v1/completions": {"model": "m", "prompt": text},
          "/api/generate": {"model": "m", "prompt": text, "stream": False},
          "/v1/embeddings": {"model": "m", "input": text},
          "/tokenize": {"model": "m", "content": text},
          "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": text}]},
          "/api/chat": {"model": "m", "messages": [{"role": "user", "content": text}], "stream": False}}
# Named cases: (path, body).
cases = {"tool-8mb": ("/v1/chat/completions", {"model": "m", "messages": user, "tools": [tool(0, text)]}),
         "tools-8500": ("/v1/chat/completions", {"model": "m", "messages": user, "tools": [tool(i, "d" * 800) for i in range(8500)]}),
         "messages-8mb": ("/v1/messages", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}),
         "count-tools-8500": ("/v1/messages/count_tokens", {"model": "m", "messages": user, "tools": [{"name": f"f{i}", "description": "d" * 800, "input_schema": {"type": "object"}} for i in range(8500)]}),
         "ollama-tools-8500": ("/api/chat", {"model": "m", "messages": user, "stream": False, "tools": [tool(i, "d" * 800) for i in range(8500)]}),
         "rerank-20000": ("/v1/rerank", {"model": "m", "query": "q", "documents": ["abcd"] * 20_000}),
         "rerank-1.5M": ("/v1/rerank", {"model": "m", "query": "q", "documents": ["d"] * 1_500_000}),
         "embeddings-1.5M": ("/v1/embeddings", {"model": "m", "input": ["a"] * 1_500_000}),
         "api-embed-1.5M": ("/api/embed", {"model": "m", "input": ["a"] * 1_500_000})}
path, body = cases[path] if path in cases else (path, bodies[path])
data = json.dumps(body).encode()
del text, body
res = []
def one():
    t = time.time()
    try:
        r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, {"content-type": "application/json"}))
        code = r.status; body = r.read()[:200]
    except urllib.error.HTTPError as e:
        code = e.code; body = e.read()[:200]
    res.append((code, round((time.time() - t) * 1000), body))
for _ in range(rounds):
    ts = [threading.Thread(target=one) for _ in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
after = list(hwm())
ms = [r[1] for r in res]
print(path, "x", n, "rounds", rounds, res if rounds == 1 else sorted({(r[0], r[2]) for r in res}),
      "ms median", statistics.median(ms), "max", max(ms),
      "HWM growth MiB", (int(after[0]) - int(base[0])) / 1024, "RSS after growth MiB", (int(after[1]) - int(base[1])) / 1024)
p.terminate(); p.wait()
