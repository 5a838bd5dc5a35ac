"""Error mapping: status codes, the OpenAI envelope, the SDK's exception classes."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import openai
import pytest

from checks import check_error_envelope
from conftest import MODEL_ID

MESSAGES = [{"role": "user", "content": "Hello there"}]


def test_unknown_model(client):
    with pytest.raises(openai.NotFoundError) as ei:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert ei.value.status_code == 404
    assert ei.value.code == "model_not_found"
    check_error_envelope(ei.value, 404, code="model_not_found")


def test_unknown_model_stream_fails_before_the_stream(client):
    with pytest.raises(openai.NotFoundError) as ei:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)
    check_error_envelope(ei.value, 404, code="model_not_found")


def test_unknown_model_legacy(client):
    with pytest.raises(openai.NotFoundError) as ei:
        client.completions.create(model="no-such-model", prompt="Hi")
    check_error_envelope(ei.value, 404, code="model_not_found")


def test_n_greater_than_one(client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, n=2)
    assert ei.value.param == "n"
    err = check_error_envelope(ei.value, 400, param="n")
    assert err["type"] == "invalid_request_error"


def test_n_equal_one_is_fine(client):
    out = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, n=1)
    assert len(out.choices) == 1


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", 3),
        ("temperature", -0.5),
        ("top_p", 1.5),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -2.5),
    ],
)
def test_out_of_range_sampling(client, field, value):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, **{field: value})
    assert ei.value.param == field
    err = check_error_envelope(ei.value, 400, param=field)
    assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"max_tokens": 5, "max_completion_tokens": 6}, id="max-tokens-conflict"),
        pytest.param({"stream_options": {"include_usage": True}}, id="stream-options-without-stream"),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
                    }
                ]
            },
            id="image-part",
        ),
        pytest.param({"messages": [{"role": "tool", "content": "42"}]}, id="tool-without-tool-call-id"),
        pytest.param({"stop": ["a", "b", "c", "d", "e"]}, id="five-stop-strings"),
    ],
)
def test_invalid_requests(daemon, kwargs):
    # Raw HTTP: the SDK itself may refuse some of these shapes client-side.
    body = {"model": MODEL_ID, "messages": MESSAGES}
    body.update(kwargs)
    with daemon.http() as http:
        r = http.post("/v1/chat/completions", json=body)
    err = check_error_envelope(r, 400)
    assert err["type"] == "invalid_request_error"


# --------------------------------------------------------------------------
# Queue full -> 429 with Retry-After.

SLOW_SPEC = "sim:qwen2.5-1.5b?prefill_extra_ms=3000&time_scale=1&reply_tokens=4"


def _send_raw_stream_request(url: str) -> socket.socket:
    """Send a streaming chat request and return the open socket without
    reading the response, so the request occupies its slot until we close it."""
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    body = json.dumps({"model": MODEL_ID, "messages": MESSAGES, "stream": True}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        f"Content-Type: application/json\r\n"
        f"Accept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"\r\n"
    ).encode()
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(head + body)
    return s


def test_queue_full_is_429_with_retry_after(start_daemon):
    d = start_daemon(model=SLOW_SPEC, queue_depth=1)
    d.wait_queue(lambda q: q["running"] == 0 and q["waiting"] == 0, "an idle queue")

    held: list[socket.socket] = []
    try:
        held.append(_send_raw_stream_request(d.url))  # A: runs (3 s of prefill)
        d.wait_queue(lambda q: q["running"] == 1, "request A to be running")
        held.append(_send_raw_stream_request(d.url))  # B: waits in the only slot
        q = d.wait_queue(lambda q: q["waiting"] == 1, "request B to be waiting")
        assert q["running"] == 1, q

        with d.client() as c:  # max_retries=0: the SDK would otherwise retry a 429
            with pytest.raises(openai.RateLimitError) as ei:
                c.chat.completions.create(model=MODEL_ID, messages=MESSAGES)
            retry_after = ei.value.response.headers.get("retry-after")
            assert retry_after is not None, f"no Retry-After header: {dict(ei.value.response.headers)}"
            assert retry_after.strip().isdigit(), f"Retry-After should be delta-seconds: {retry_after!r}"
            check_error_envelope(ei.value, 429)

            # A streaming request is refused with a status too, not inside a 200 stream.
            with pytest.raises(openai.RateLimitError):
                c.chat.completions.create(model=MODEL_ID, messages=MESSAGES, stream=True)

        q = d.health()["queue"]
        assert (q["running"], q["waiting"]) == (1, 1), f"rejected requests must not take a slot: {q}"
    finally:
        for s in reversed(held):  # client disconnects: the daemon drops B and aborts A
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    d.wait_queue(lambda q: q["running"] == 0 and q["waiting"] == 0, "the queue to drain after the clients left")
