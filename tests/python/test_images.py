"""Images for a vision-language model, through the official `openai` and
`ollama` clients, on the simulated LLM and encoder in process and through
`dlopen` of both cdylibs.

The simulated encoder's embedding carries the mean colour of the pixels it
received, and the simulated LLM says, for each image in order, that colour
and the encoder's input size: so a reply proves which pixels reached the
encoder (after padding and resizing) and which embedding reached the run.
Test images are made here (PNG with the standard library's zlib).
"""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import ollama
import openai
import pytest

from conftest import MODEL_ID, daemon_binary

VL = "sim:qwen2.5-vl-3b?time_scale=0"


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A one-colour RGB PNG."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


def image_part(image: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(image)}}


RED, BLUE = png(40, 40, (255, 0, 0)), png(30, 30, (0, 0, 255))


def seen(*colours: str) -> str:
    each = ", ".join(f"image {i + 1} is {c} (392x392)" for i, c in enumerate(colours))
    return f"I see {len(colours)} image{'' if len(colours) == 1 else 's'}: {each}."


def images_of(completion) -> dict:
    return completion.model_extra["timings"]["images"]


def cdylib(name: str) -> Path:
    target = daemon_binary().parent
    for lib in (target / "deps" / name, target / name):
        if lib.is_file():
            return lib
    pytest.fail(f"{name} not built in {target}: run the tests with `cargo test --workspace`", pytrace=False)


@pytest.fixture(scope="module")
def vl(request):
    from conftest import DaemonManager

    mgr = DaemonManager()
    d = mgr.start(VL)
    yield d
    mgr.stop_all()


def test_two_images_in_one_message_in_order(vl):
    client = vl.client()
    c = client.chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": [image_part(RED), {"type": "text", "text": "and"}, image_part(BLUE)]}],
    )
    assert c.choices[0].message.content == seen("#ff0000", "#0000ff")
    images = images_of(c)
    assert images["count"] == 2 and images["tokens"] == 2 * (196 + 2)
    # usage counts the image tokens: exactly what the runtime prefilled.
    assert c.usage.prompt_tokens == c.model_extra["timings"]["runtime"]["prefill_tokens"]
    assert c.usage.prompt_tokens > images["tokens"]


def test_a_wide_image_is_padded_with_the_demos_grey(vl):
    # 64×32 red in a 64×64 square: half red, half grey 128 → (255+128)/2, 128/2.
    c = vl.client().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": [image_part(png(64, 32, (255, 0, 0)))]}]
    )
    assert c.choices[0].message.content == seen("#c04040")


def test_an_image_then_a_text_follow_up_does_not_run_the_encoder_again(vl):
    client = vl.client()
    green = png(16, 16, (0, 255, 0))
    turn1 = [{"role": "user", "content": [{"type": "text", "text": "What colour?"}, image_part(green)]}]
    first = client.chat.completions.create(model=MODEL_ID, messages=turn1)
    assert first.choices[0].message.content == seen("#00ff00")
    assert images_of(first)["encoder_runs"] == 1 and images_of(first)["cache_hits"] == 0
    history = turn1 + [{"role": "assistant", "content": first.choices[0].message.content}]
    second = client.chat.completions.create(model=MODEL_ID, messages=history + [{"role": "user", "content": "Sure?"}])
    assert second.choices[0].message.content == seen("#00ff00"), "the image of turn 1 is still in the prompt"
    # The KV cache holds the image's positions: only the new text is prefilled, and no embedding
    # is needed, from the encoder or from its cache.
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    assert images_of(second)["encoder_runs"] == 0 and images_of(second)["cache_hits"] == 0
    assert images_of(second)["encoder_ms"] is None


def test_streaming_ends_with_the_image_figures(vl):
    stream = vl.client().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": [image_part(BLUE)]}], stream=True
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == seen("#0000ff")
    assert chunks[-1].model_extra["timings"]["images"]["count"] == 1


def test_http_urls_are_not_fetched(vl):
    with pytest.raises(openai.BadRequestError) as e:
        vl.client().chat.completions.create(
            model=MODEL_ID,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/a.png"}}]}],
        )
    assert e.value.status_code == 400 and e.value.code == "invalid_image"
    assert vl.health()["status"] == "ok"


def test_ollama_images_on_chat_and_generate(vl):
    client = ollama.Client(host=vl.url, timeout=30)
    reply = client.chat(model=MODEL_ID, messages=[{"role": "user", "content": "What is it?", "images": [RED]}])
    assert reply.message.content == seen("#ff0000")
    generated = client.generate(model=MODEL_ID, prompt="Describe", images=[BLUE, RED])
    assert generated.response == seen("#0000ff", "#ff0000")
    assert "vision" in client.show(MODEL_ID).capabilities


def test_a_model_without_an_encoder_refuses_images(start_daemon):
    d = start_daemon("sim:qwen2.5-1.5b?time_scale=0&reply_tokens=4")
    with pytest.raises(openai.BadRequestError) as e:
        d.client().chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": [image_part(RED)]}])
    assert e.value.code == "images_not_supported"
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=d.url, timeout=30).chat(model=MODEL_ID, messages=[{"role": "user", "content": "x", "images": [RED]}])
    assert e.value.status_code == 400
    assert "vision" not in ollama.Client(host=d.url, timeout=30).show(MODEL_ID).capabilities


def test_through_dlopen_of_both_cdylibs(start_daemon):
    d = start_daemon(
        VL,
        backend="rkllm",
        extra_args=("--lib", str(cdylib("librkllm_sim.so")), "--vision-lib", str(cdylib("librknn_sim.so"))),
    )
    c = d.client().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": [image_part(BLUE), image_part(RED)]}]
    )
    assert c.choices[0].message.content == seen("#0000ff", "#ff0000")
    # The encoder came from the library, not the in-process simulator.
    assert d.http().get("/v1/models").json()["data"][0]["vision"]["origin"].endswith("librknn_sim.so")


def test_an_image_chat_is_restored_after_a_side_task_took_the_cache(start_daemon):
    # Prefills that take time (a twentieth of a board's), so that a file's load on a busy
    # machine never measures costlier than prefilling again.
    client = start_daemon(model="sim:qwen2.5-vl-3b?time_scale=0.05").client()
    red = png(16, 16, (255, 0, 0))
    turn1 = [{"role": "user", "content": [{"type": "text", "text": "What colour?"}, image_part(red)]}]
    first = client.chat.completions.create(model=MODEL_ID, messages=turn1)
    # A chat UI's title task between the turns takes the KV cache.
    task = "### Task:\nGenerate a concise title.\n<chat_history>\nUSER: What colour?\n</chat_history>"
    client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": task}])
    history = turn1 + [{"role": "assistant", "content": first.choices[0].message.content}]
    second = client.chat.completions.create(model=MODEL_ID, messages=history + [{"role": "user", "content": "Sure?"}])
    assert second.choices[0].message.content == seen("#ff0000"), "the model still sees the image"
    # Turn 1's saved file held its whole prompt, the image's positions among it.
    timings = second.model_extra["timings"]
    assert timings["cache"] == "restored", timings
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens
    assert images_of(second)["encoder_runs"] == 0 and images_of(second)["cache_hits"] == 1
