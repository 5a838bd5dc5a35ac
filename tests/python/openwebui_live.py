"""Open WebUI driven by hand in headless Chromium (not run in CI: Open WebUI
is ~7 GB). Four chat turns in a new chat, with Open WebUI's default settings
(native function calling: 36 built-in tools; title, tags and follow-up
tasks between turns); prints the replies it shows. Read the daemon's log
for what it did (`request finished … cache=`, `dropped_tools=`).

    python3 -m venv /work/owui && /work/owui/bin/pip install open-webui playwright
    apt-get install chromium
    DATA_DIR=/tmp/owui WEBUI_AUTH=False OPENAI_API_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=none \\
      ENABLE_OLLAMA_API=False ENABLE_PERSISTENT_CONFIG=False OFFLINE_MODE=True HF_HUB_OFFLINE=1 \\
      RAG_EMBEDDING_MODEL_AUTO_UPDATE=False /work/owui/bin/open-webui serve --port 8081 &
    /work/owui/bin/python tests/python/openwebui_live.py http://127.0.0.1:8081/ /tmp/owui-shots

(`OLLAMA_BASE_URL=http://127.0.0.1:8080` instead, without `ENABLE_OLLAMA_API=False`, for the
Ollama connection.) A screenshot of each turn goes to the directory given. With an image file as
a third argument, the first turn uploads it through the chat input's file picker (serve a model
with a vision encoder, e.g. `sim:qwen2.5-vl-3b`, whose simulated reply names the image's size and
colour).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

# Chromium on a machine without internet (docs/clients.md).
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
QUESTIONS = ["What is an NPU?", "How fast is it?", "Can it run Qwen?", "Thanks, summarise."]


def main() -> None:
    url, shots = sys.argv[1], Path(sys.argv[2])
    image = sys.argv[3] if len(sys.argv) > 3 else None
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="load", timeout=60000)
        page.wait_for_selector("#chat-input", timeout=60000)
        # The release notes open a moment after the page, over the input.
        release_notes = page.get_by_text("Okay, Let's Go!")
        try:
            release_notes.click(timeout=5000)
        except PlaywrightTimeout:
            pass
        for turn, question in enumerate(QUESTIONS, 1):
            if image and turn == 1:
                page.locator("input[type='file']").first.set_input_files(image)
                # The upload shows as a thumbnail in the input before it can be sent.
                page.wait_for_selector("img[data-cy='image']", timeout=30000)
            page.locator("#chat-input").click()
            page.keyboard.type(question)
            page.keyboard.press("Enter")
            # Done when Open WebUI's Stop button is gone again.
            page.wait_for_selector("button[aria-label='Stop']", timeout=30000)
            deadline = time.time() + 300
            while time.time() < deadline and page.locator("button[aria-label='Stop']").count():
                page.wait_for_timeout(200)
            page.screenshot(path=str(shots / f"turn{turn}.png"), full_page=True)
        replies = page.locator("#response-content-container").all_inner_texts()
        print(f"{len(replies)} of {len(QUESTIONS)} turns answered")
        for reply in replies:
            print(" -", reply[:100].replace("\n", " "))
        browser.close()


if __name__ == "__main__":
    main()
