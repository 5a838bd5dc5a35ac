# Reliability measurement (not a test; docs/reliability.md, "Slow bodies and the connection cap").
# usage: reliability_connection_share.py BIN PORT [SECONDS] [DAEMON ARGS...]
# 127.0.0.2 keeps 512 connections trickling a body (a byte every 2 s; each one closed is opened
# again at once), while 127.0.0.3 sends a chat and 127.0.0.4 asks GET /health/ready, each every
# 200 ms. Prints what each address got.
import socket, sys, time, subprocess, statistics

bin, port = sys.argv[1], int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 70
extra = sys.argv[4:]
p = subprocess.Popen(
    [bin, "--backend", "sim", "--model", "sim:instant?reply_tokens=4", "--model-id", "m", "--port", str(port), *extra],
    stderr=subprocess.DEVNULL,
)
time.sleep(2.5)
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def connect(source):
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def request(source, raw):
    """One request on a new connection from `source`: (status, body, ms)."""
    t = time.time()
    s = connect(source)
    s.settimeout(10)
    s.sendall(raw)
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    s.close()
    return data[9:12].decode() or "none", data.split(b"\r\n\r\n", 1)[-1], (time.time() - t) * 1000


def trickler():
    s = connect("127.0.0.2")
    s.setblocking(False)
    s.send(HEAD)
    return s


chat = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(CHAT), CHAT)
ready = b"GET /health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
conns = [trickler() for _ in range(512)]
answers = {}  # what the trickling connections were answered (their first status line)
opened = 512
chats, readies, ready_bodies = {}, {}, {}
chat_ms = []
start = time.time()
last_trickle = 0
while time.time() - start < seconds:
    if time.time() - last_trickle > 2:
        for s in conns:
            try:
                s.send(b" ")
            except OSError:
                pass
        last_trickle = time.time()
    # Connections the daemon answered (503 over the share, 408 too slow) are opened again.
    for i, s in enumerate(conns):
        try:
            d = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            d = b""
        code = d[9:12].decode() or "closed"
        answers[code] = answers.get(code, 0) + 1
        s.close()
        conns[i] = trickler()
        opened += 1
    code, _, ms = request("127.0.0.3", chat)
    chats[code] = chats.get(code, 0) + 1
    chat_ms.append(ms)
    code, body, _ = request("127.0.0.4", ready)
    readies[code] = readies.get(code, 0) + 1
    status = body.split(b'"status":"', 1)[-1].split(b'"', 1)[0].decode() if b'"status"' in body else "?"
    ready_bodies[status] = ready_bodies.get(status, 0) + 1
    time.sleep(0.2)
print("127.0.0.2 trickling: connections opened", opened, "answered", answers)
print("127.0.0.3 chats:", chats, "ms median", round(statistics.median(chat_ms), 1), "p99", round(sorted(chat_ms)[int(len(chat_ms) * 0.99)], 1))
print("127.0.0.4 /health/ready:", readies, "status", ready_bodies)
p.terminate()
p.wait()
