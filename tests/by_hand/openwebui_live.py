"""Open WebUI driven live in headless Chromium, by hand (not run by `cargo test`
or CI: Open WebUI is ~7 GB). See README.md beside this file for the setup.

Four turns in a new chat with Open WebUI's default settings (native function
calling with its built-in tools; the side tasks: a new chat's title and tags,
follow-up suggestions after every reply); the first turn uploads an image through the chat input's file picker
(a generated PNG unless one is given). Open WebUI reaches the daemon through
a loopback recorder that this script runs (`--listen`, forwarding to
`--daemon`): every request Open WebUI sent is written to OUT/requests.jsonl
with the usage the daemon answered, and a table of them is printed — which
were chat turns and which side tasks, and each one's cached share of its
prompt. After a reply the next turn waits until the side tasks it set off
have been answered, as a user reading the reply would. OUT/final.png is the
page at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

# Chromium on a machine without internet (docs/clients.md).
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
QUESTIONS = ["What is in this picture?", "Describe its colour.", "What could it be used for?",
             "Thanks, summarise."]
# Open WebUI's default task prompts start with this line; the next one says what the task is
# (0.12.4: "Generate a concise title …", "Generate 1-3 broad tags …", "Predict 3-5 useful messages
# this user might naturally send next …").
TASK_MARK = "### Task:"
TASKS = [("title", "title"), ("tags", "tags"), ("follow-ups", "send next")]
# Generous: a turn on the simulator takes seconds; a hang shows as a failure.
WAIT_MS = 300_000


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A PNG of one colour, made without an imaging library."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def text_of(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def images_in(messages: list) -> int:
    return sum(1 for m in messages if isinstance(m.get("content"), list)
               for part in m["content"] if isinstance(part, dict) and part.get("type") == "image_url")


def kind_of(body: dict) -> str:
    """A chat turn, or which of Open WebUI's side tasks."""
    messages = body.get("messages") or []
    last = text_of(messages[-1]) if messages else ""
    if TASK_MARK not in last:
        return "turn"
    task = last.split(TASK_MARK, 1)[1].strip().split("\n", 1)[0].lower()
    return next((name for name, word in TASKS if word in task), "task")


def reply_of(body: dict, raw: bytes) -> dict:
    """The usage and cache figures of a JSON reply, or of a stream's last chunk that has usage."""
    if not body.get("stream"):
        try:
            return json.loads(raw)
        except ValueError:
            return {}
    last = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                last = chunk
    return last


class Recorder:
    """What passed through the proxy, and a way to wait on it."""

    def __init__(self, log: Path):
        self.changed = threading.Condition()
        self.rows: list[dict] = []
        self.in_flight = 0
        self.log = log.open("w")

    def started(self) -> None:
        with self.changed:
            self.in_flight += 1

    def finished(self, request: dict, status: int, raw: bytes, ms: float) -> None:
        reply = reply_of(request, raw)
        usage, timings = reply.get("usage") or {}, reply.get("timings") or {}
        row = {
            "kind": kind_of(request), "stream": bool(request.get("stream")), "status": status,
            "images": images_in(request.get("messages") or []), "messages": len(request.get("messages") or []),
            "tools": len(request.get("tools") or []),
            "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
            "cache": timings.get("cache"), "cache_miss": timings.get("cache_miss"),
            "ttft_ms": timings.get("ttft_ms"), "client_ms": round(ms), "request": request,
        }
        with self.changed:
            self.log.write(json.dumps(row) + "\n")
            self.log.flush()
            self.rows.append(row)
            self.in_flight -= 1
            self.changed.notify_all()

    def aborted(self) -> None:
        with self.changed:
            self.in_flight -= 1
            self.changed.notify_all()

    def wait(self, done, what: str) -> None:
        """Until `done(rows)` holds with nothing in flight."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.in_flight == 0 and done(self.rows), WAIT_MS / 1000):
                raise TimeoutError(f"waited {WAIT_MS / 1000:.0f} s for {what}; seen: {[r['kind'] for r in self.rows]}")


def proxy(recorder: Recorder, daemon: str):
    target = urlsplit(daemon)

    class Forward(BaseHTTPRequestHandler):
        def forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection", "accept-encoding", "content-length")}
            recorded = self.command == "POST" and self.path.endswith("/chat/completions")
            request = json.loads(data) if recorded and data else {}
            start = time.monotonic()
            if recorded:
                recorder.started()
            upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=WAIT_MS / 1000)
            raw = bytearray()
            try:
                upstream.request(self.command, self.path, body=data, headers=headers)
                reply = upstream.getresponse()
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                # Chunk by chunk, so that a stream reaches Open WebUI as it is made.
                while chunk := reply.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if recorded:
                        raw += chunk
            except Exception:
                if recorded:
                    recorder.aborted()
                raise
            finally:
                upstream.close()
            self.close_connection = True
            if recorded:
                recorder.finished(request, reply.status, bytes(raw), (time.monotonic() - start) * 1000)

        do_GET = do_POST = do_DELETE = do_PUT = forward

        def log_message(self, *args) -> None:
            pass

    return Forward


def chat(url: str, out: Path, model: str, image: Path, recorder: Recorder) -> list[str]:
    with sync_playwright() as p:
        # A fresh profile each run: nothing of an earlier run's chats or settings.
        profile = out / "chromium"
        shutil.rmtree(profile, ignore_errors=True)
        browser = p.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium", args=ARGS,
                                                       viewport={"width": 1400, "height": 1000})
        page = browser.new_page()
        page.goto(url, wait_until="load", timeout=60000)
        page.wait_for_selector("#chat-input", timeout=60000)
        # The release notes open a moment after the page, over the input.
        try:
            page.get_by_text("Okay, Let's Go!").click(timeout=5000)
        except PlaywrightTimeout:
            pass
        # The model, picked in the selector above the chat as a user would.
        page.locator("#model-selector-model-button").click()
        page.locator(f"[role='option'][aria-label='Select {model} model']").click()
        page.wait_for_selector(f"#model-selector-model-button[aria-label='Selected model: {model}']", timeout=30000)
        for turn, question in enumerate(QUESTIONS, 1):
            if turn == 1:
                page.locator("input[type='file']").first.set_input_files(str(image))
                # The upload shows as a thumbnail in the input before it can be sent.
                page.wait_for_selector("img[data-cy='image']", timeout=30000)
            sent = len(recorder.rows)
            page.locator("#chat-input").click()
            page.keyboard.type(question)
            page.keyboard.press("Enter")
            # Answered when the turn's request came back and Open WebUI's Stop button is gone.
            recorder.wait(lambda rows, n=turn: sum(r["kind"] == "turn" for r in rows) == n, f"turn {turn}")
            page.wait_for_selector("button[aria-label='Stop']", state="detached", timeout=WAIT_MS)
            page.wait_for_function("n => document.querySelectorAll('#response-content-container').length >= n",
                                   arg=turn, timeout=WAIT_MS)
            # The next turn is typed once the side tasks of this one were answered: with Open
            # WebUI's defaults, follow-ups after every reply, and a new chat's title (sent beside
            # its first turn) and tags (after its first reply).
            tasks = {"follow-ups", "title", "tags"} if turn == 1 else {"follow-ups"}
            recorder.wait(lambda rows, t=tasks: t <= {r["kind"] for r in rows[sent:]},
                          f"the side tasks after turn {turn}")
            page.screenshot(path=str(out / f"turn{turn}.png"), full_page=True)
        texts = page.locator("#response-content-container").all_inner_texts()
        page.screenshot(path=str(out / "final.png"), full_page=True)
        browser.close()
        return texts


def table(rows: list[dict]) -> None:
    print(f"{'#':>2} {'request':<10} {'img':>3} {'msgs':>4} {'tools':>5} {'status':>6} "
          f"{'prompt':>6} {'cached':>6} {'share':>6}  cache (miss)")
    for i, r in enumerate(rows, 1):
        share = f"{100 * r['cached_tokens'] / r['prompt_tokens']:.1f}%" if r["prompt_tokens"] else "-"
        miss = f" ({r['cache_miss']})" if r["cache_miss"] else ""
        print(f"{i:>2} {r['kind']:<10} {r['images']:>3} {r['messages']:>4} {r['tools']:>5} {r['status']:>6} "
              f"{r['prompt_tokens'] or '-':>6} {r['cached_tokens'] if r['cached_tokens'] is not None else '-':>6} "
              f"{share:>6}  {r['cache']}{miss}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("webui", help="Open WebUI's URL, e.g. http://127.0.0.1:8081/")
    parser.add_argument("out", type=Path, help="a directory outside the repository: screenshots, requests.jsonl")
    parser.add_argument("--daemon", default="http://127.0.0.1:8080", help="rkllmd's URL (no /v1)")
    parser.add_argument("--listen", type=int, default=8079,
                        help="the recorder's loopback port: Open WebUI's OPENAI_API_BASE_URL=http://127.0.0.1:PORT/v1")
    parser.add_argument("--model", required=True, help="the served model's id (it needs a vision encoder)")
    parser.add_argument("--image", type=Path, help="the image for the first turn (default: a generated 200x150 PNG)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    image = args.image
    if image is None:
        image = args.out / "red.png"
        image.write_bytes(png(200, 150, (197, 55, 55)))
    recorder = Recorder(args.out / "requests.jsonl")
    server = ThreadingHTTPServer(("127.0.0.1", args.listen), proxy(recorder, args.daemon))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        replies = chat(args.webui, args.out, args.model, image, recorder)
    finally:
        server.shutdown()
    print(f"{len(replies)} of {len(QUESTIONS)} turns answered")
    for reply in replies:
        print(" -", reply[:100].replace("\n", " "))
    table(recorder.rows)
    turns = [r for r in recorder.rows if r["kind"] == "turn"]
    ok = len(replies) == len(QUESTIONS) and all(r["status"] == 200 for r in recorder.rows)
    for n, r in enumerate(turns[1:], 2):
        share = (r["cached_tokens"] or 0) / r["prompt_tokens"] if r["prompt_tokens"] else 0
        ok &= share >= 0.9
        print(f"turn {n}: {r['cached_tokens']} of {r['prompt_tokens']} cached ({share:.1%}) "
              f"{'>= 90 %' if share >= 0.9 else 'BELOW 90 %'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
