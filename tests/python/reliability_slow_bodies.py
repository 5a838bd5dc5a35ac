# Reliability measurement (not a test; docs/reliability.md). usage: reliability_slow_bodies.py BIN PORT. 512 connections trickling a body one byte every 2 s; /health timed throughout.
import socket, sys, time, subprocess, statistics
bin, port = sys.argv[1], int(sys.argv[2])
p = subprocess.Popen([bin, "--backend", "sim", "--model", "sim:instant", "--model-id", "m", "--port", str(port)], stderr=subprocess.DEVNULL)
time.sleep(2.5)
conns = []
for i in range(512):
    s = socket.create_connection(("127.0.0.1", port)); s.setblocking(False)
    s.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    conns.append(s)
times, codes = [], {}
start = time.time()
last_trickle = 0
while time.time() - start < 70:
    if time.time() - last_trickle > 2:
        for s in conns:
            try: s.send(b" ")
            except Exception: pass
        last_trickle = time.time()
    t = time.time()
    h = socket.create_connection(("127.0.0.1", port))
    h.send(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = h.recv(65536)
        if not d: break
        data += d
    times.append((time.time() - t) * 1000)
    code = data[9:12].decode(); codes[code] = codes.get(code, 0) + 1
    h.close()
    time.sleep(0.2)
alive = 0
for s in conns:
    try:
        d = s.recv(4096)
        pass  # an answer (the 408) came: closed
    except BlockingIOError: alive += 1
    except Exception: pass
print("health codes", codes, "ms median", round(statistics.median(times), 1), "p99", round(sorted(times)[int(len(times)*0.99)], 1), "max", round(max(times), 1), "n", len(times), "slow conns still open after 70 s:", alive)
p.terminate(); p.wait()
