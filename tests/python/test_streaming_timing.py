"""Streams are real streams: nothing before the first token, tokens as they come.

Uses the sim at real pacing (time_scale=1) with an extra 300 ms of prefill so the
phases are long enough to see from the client.
"""

from __future__ import annotations

import json
import time

import pytest

from checks import check_timings, parse_sse
from conftest import MODEL_ID

PREFILL_EXTRA_MS = 300
TOKENS = 6
SPEC = f"sim:qwen2.5-1.5b?time_scale=1&prefill_extra_ms={PREFILL_EXTRA_MS}&reply_tokens={TOKENS}"


@pytest.fixture
def paced(start_daemon):
    return start_daemon(model=SPEC)


def test_first_chunk_waits_for_the_first_token_and_tokens_are_not_buffered(paced):
    arrivals: list[tuple[float, str]] = []  # (seconds since send, data payload)
    with paced.http() as http:
        t_send = time.monotonic()
        with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": MODEL_ID, "messages": [{"role": "user", "content": "Count to six."}], "stream": True},
        ) as r:
            assert r.status_code == 200, r.read()
            buf = ""
            for text in r.iter_text():
                now = time.monotonic() - t_send
                buf += text
                while "\n\n" in buf:
                    block, buf = buf.split("\n\n", 1)
                    for payload in parse_sse(block + "\n\n"):
                        arrivals.append((now, payload))
    t_end = time.monotonic() - t_send

    assert arrivals and arrivals[-1][1] == "[DONE]", arrivals
    events = [(t, json.loads(p)) for t, p in arrivals[:-1]]
    final = events[-1][1]
    timings = final["timings"]
    check_timings(timings, final["usage"])
    assert final["usage"]["completion_tokens"] == TOKENS

    # Prefill includes the simulated extra time.
    assert timings["prompt_ms"] >= PREFILL_EXTRA_MS * 0.95, timings

    # No chunk (not even the role chunk) before the first token exists.
    first_event_ms = events[0][0] * 1000
    assert first_event_ms >= PREFILL_EXTRA_MS * 0.95, f"first chunk after {first_event_ms:.1f} ms, before prefill could end"
    assert first_event_ms >= timings["ttft_ms"] - 2, (
        f"first chunk arrived {first_event_ms:.1f} ms after send but the server's TTFT is {timings['ttft_ms']} ms"
    )
    # The server's view fits inside the client's.
    assert timings["e2e_ms"] <= t_end * 1000 + 2, (timings, t_end)

    # Token chunks arrive spread over the decode phase, not in one burst at the end.
    token_times = [t for t, e in events if e.get("choices") and e["choices"][0]["delta"].get("content") is not None]
    assert len(token_times) >= TOKENS
    span_ms = (token_times[-1] - token_times[0]) * 1000
    decode_ms = timings["predicted_ms"]
    assert span_ms >= 0.5 * decode_ms, (
        f"token chunks arrived within {span_ms:.1f} ms while decoding took {decode_ms} ms: the stream is buffered"
    )
