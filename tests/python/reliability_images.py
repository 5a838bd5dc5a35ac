"""12 concurrent chats, each with the same 7,000x7,000 PNG: the daemon's peak memory (VmHWM) before and after.
Usage: python3 tests/python/reliability_images.py BINARY N   (docs/reliability.md, "Images in memory")."""
import base64, json, struct, sys, threading, time, urllib.request, zlib, subprocess, re, os
def png(w, h, rgb):
    row = b"\x00" + bytes(rgb) * w
    raw = zlib.compress(row * h, 9)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")
bin_, n = sys.argv[1], int(sys.argv[2])
img = png(7000, 7000, (200, 10, 10)); print("png bytes", len(img))
url = "data:image/png;base64," + base64.b64encode(img).decode()
d = subprocess.Popen([bin_, "--host", "127.0.0.1", "--port", "18777", "--model", "sim:qwen2.5-vl-3b?time_scale=0", "--model-id", "m"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
time.sleep(3)
def hwm():
    s = open(f"/proc/{d.pid}/status").read()
    return int(re.search(r"VmHWM:\s+(\d+)", s).group(1)) // 1024, int(re.search(r"VmRSS:\s+(\d+)", s).group(1)) // 1024
def post(body):
    r = urllib.request.Request("http://127.0.0.1:18777/v1/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=600) as resp: return resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as e: return e.code, e.read()[:200]
small = png(8, 8, (1, 2, 3)); post({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(small).decode()}}, {"type": "text", "text": "x"}]}]})
before = hwm(); print("before (HWM, RSS) MiB", before)
results = []
body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "x"}]}]}
t0 = time.time()
ths = [threading.Thread(target=lambda: results.append(post(body))) for _ in range(n)]
[t.start() for t in ths]; [t.join() for t in ths]
after = hwm(); print("after (HWM, RSS) MiB", after, "peak +", after[0] - before[0], "MiB;", n, "requests in", round(time.time() - t0, 1), "s")
print(sorted(set((s, str(c)[:60]) for s, c in results)))
d.terminate(); d.wait()
