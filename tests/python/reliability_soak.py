# Reliability measurement (not a test; docs/reliability.md). usage: reliability_soak.py BIN PORT N. Soak: N mixed requests over 8 keep-alive connections; RSS before (after a warm-up) and after.
import http.client, json, sys, threading, time, subprocess
bin, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = subprocess.Popen([bin, "--backend", "sim", "--model", "sim:instant?reply_tokens=16", "--model-id", "m", "--port", str(port)], stderr=subprocess.DEVNULL)
time.sleep(2.5)
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
reqs = [
    ("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}),
    ("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "stream"}], "stream": True}),
    ("POST", "/v1/completions", {"model": "m", "prompt": "once", "max_tokens": 8}),
    ("POST", "/v1/embeddings", {"model": "m", "input": ["a", "b"]}),
    ("POST", "/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}),
    ("POST", "/v1/chat/completions", {"model": "m", "messages": []}),
    ("POST", "/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
    ("GET", "/v1/models", None),
    ("GET", "/health", None),
]
codes = {}
lock = threading.Lock()
def worker(count):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(count):
        m, path, body = reqs[i % len(reqs)]
        try:
            c.request(m, path, json.dumps(body) if body is not None else None, {"content-type": "application/json"})
            r = c.getresponse(); r.read()
            with lock: codes[r.status] = codes.get(r.status, 0) + 1
        except Exception as e:
            with lock: codes[str(type(e).__name__)] = codes.get(str(type(e).__name__), 0) + 1
            c = http.client.HTTPConnection("127.0.0.1", port)
def run(total):
    ts = [threading.Thread(target=worker, args=(total // 8,)) for _ in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
run(1000)
before = rss(); t = time.time()
run(n)
after = rss()
print(f"{n} requests in {time.time()-t:.0f} s; codes {codes}; RSS after warm-up {before/1024:.1f} MiB, after {after/1024:.1f} MiB, growth {(after-before)/1024:.2f} MiB")
p.terminate(); p.wait()
