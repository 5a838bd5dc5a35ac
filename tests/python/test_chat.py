"""Chat completions through the official SDK, streamed and not."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from checks import check_error_envelope, check_timings, check_usage, parse_sse
from conftest import MODEL_ID, REPLY_TOKENS

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Say hello in five words."},
]
SEED = 1234


def _non_stream_text(client) -> str:
    c = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, seed=SEED)
    return c.choices[0].message.content


def test_non_stream(client):
    t0 = time.time()
    raw = client.chat.completions.with_raw_response.create(model=MODEL_ID, messages=MESSAGES, seed=SEED)
    t1 = time.time()
    assert raw.status_code == 200
    assert raw.headers.get("content-type", "").startswith("application/json")
    c = raw.parse()

    assert isinstance(c.id, str) and c.id
    assert c.object == "chat.completion"
    assert isinstance(c.created, int)
    assert t0 - 2 <= c.created <= t1 + 2, f"created {c.created} not close to now ({t0:.0f}..{t1:.0f})"
    assert c.model == MODEL_ID
    assert len(c.choices) == 1
    choice = c.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")

    assert c.usage is not None
    assert c.usage.prompt_tokens > 0
    assert c.usage.completion_tokens == REPLY_TOKENS
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens

    # The extension field survives the SDK's parsing ...
    assert c.model_extra is not None and "timings" in c.model_extra, "timings missing from the parsed completion"
    # ... and on the wire it obeys docs/timings.md.
    body = json.loads(raw.text)
    assert body["choices"][0].get("logprobs", None) is None
    check_usage(body["usage"], completion_tokens=REPLY_TOKENS)
    check_timings(body["timings"], body["usage"])
    assert body["timings"] == c.model_extra["timings"]


def test_non_stream_one_token_has_null_rates(client):
    c = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, seed=SEED, max_tokens=1)
    assert c.usage.completion_tokens == 1
    assert c.choices[0].finish_reason == "length"
    timings = c.model_extra["timings"]
    check_timings(timings, c.usage.model_dump())
    assert timings["predicted_n"] == 1
    assert timings["predicted_per_second"] is None


def test_max_completion_tokens_is_honoured(client):
    c = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, seed=SEED, max_completion_tokens=3)
    assert c.usage.completion_tokens == 3
    assert c.choices[0].finish_reason == "length"


def test_stream_with_include_usage(client):
    expected_text = _non_stream_text(client)

    t0 = time.time()
    stream = client.chat.completions.create(
        model=MODEL_ID,
        messages=MESSAGES,
        seed=SEED,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    t1 = time.time()
    assert len(chunks) >= 3, chunks

    # Same id and created everywhere.
    assert len({c.id for c in chunks}) == 1, [c.id for c in chunks]
    assert len({c.created for c in chunks}) == 1, [c.created for c in chunks]
    assert t0 - 2 <= chunks[0].created <= t1 + 2
    for c in chunks:
        assert c.object == "chat.completion.chunk"
        assert c.model == MODEL_ID

    # The usage chunk is last, with no choices.
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == REPLY_TOKENS
    assert usage_chunk.usage.prompt_tokens > 0
    assert usage_chunk.usage.total_tokens == usage_chunk.usage.prompt_tokens + REPLY_TOKENS
    check_timings(usage_chunk.model_extra.get("timings"), usage_chunk.usage.model_dump())

    body = chunks[:-1]
    for c in body:
        assert len(c.choices) == 1 and c.choices[0].index == 0, c

    # The first chunk opens the assistant message.
    first = body[0].choices[0]
    assert first.delta.role == "assistant"
    assert first.delta.content is not None, "the role chunk carries content (\"\" or the first token's text)"
    for c in body[1:]:
        assert c.choices[0].delta.role is None, f"role repeated after the first chunk: {c}"

    # Exactly one finish chunk: the last one with choices, empty delta.
    finish = body[-1].choices[0]
    assert finish.finish_reason in ("stop", "length")
    assert finish.delta.content is None and finish.delta.role is None and not finish.delta.tool_calls, finish
    for c in body[:-1]:
        assert c.choices[0].finish_reason is None, c

    # One chunk per generated token, including tokens whose text is "" (a
    # WAITING piece that ends inside a UTF-8 character). The role rides on the
    # first token's chunk; a daemon may instead send a separate
    # {"role":"assistant","content":""} chunk just before it, which is then not
    # a token chunk.
    contents = [c.choices[0].delta.content for c in body[:-1]]
    token_chunks = [t for t in contents if t is not None]
    if first.delta.content == "" and len(token_chunks) == REPLY_TOKENS + 1:
        token_chunks = token_chunks[1:]
    assert len(token_chunks) == REPLY_TOKENS, contents
    assert usage_chunk.usage.completion_tokens == len(token_chunks)

    text = "".join(c.choices[0].delta.content or "" for c in body)
    assert text == expected_text


def test_stream_without_include_usage_sdk(client):
    expected_text = _non_stream_text(client)
    chunks = list(client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, seed=SEED, stream=True))
    # No extra usage-only chunk unless it was asked for (old clients index choices[0]).
    assert all(c.choices for c in chunks), "a chunk with choices == [] was sent without include_usage"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == expected_text
    last = chunks[-1]
    assert last.choices[0].finish_reason in ("stop", "length")
    # The last chunk still carries usage and timings.
    assert last.usage is not None and last.usage.completion_tokens == REPLY_TOKENS
    check_timings(last.model_extra.get("timings"), last.usage.model_dump())


def test_stream_without_include_usage_raw_sse(daemon):
    with daemon.http() as http:
        with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": MODEL_ID, "messages": MESSAGES, "seed": SEED, "stream": True},
        ) as r:
            assert r.status_code == 200, r.read()
            assert r.headers["content-type"].startswith("text/event-stream"), r.headers
            assert "no-cache" in r.headers.get("cache-control", ""), r.headers
            assert r.headers.get("x-accel-buffering") == "no", r.headers
            raw = r.read().decode("utf-8")

    assert raw.endswith("data: [DONE]\n\n"), f"stream does not end with 'data: [DONE]\\n\\n': {raw[-200:]!r}"
    payloads = parse_sse(raw)
    assert payloads[-1] == "[DONE]"
    assert payloads.count("[DONE]") == 1
    events = [json.loads(p) for p in payloads[:-1]]
    assert events, raw
    for e in events:
        assert "error" not in e, e
        assert e["object"] == "chat.completion.chunk"
    assert len({e["id"] for e in events}) == 1
    assert len({e["created"] for e in events}) == 1

    first = events[0]["choices"][0]["delta"]
    assert first.get("role") == "assistant" and "content" in first, first

    last = events[-1]
    assert last["choices"], "without include_usage the finish chunk is last and keeps its choices"
    assert last["choices"][0]["finish_reason"] in ("stop", "length")
    assert last["choices"][0]["delta"] == {}, last
    check_usage(last["usage"], completion_tokens=REPLY_TOKENS)
    check_timings(last["timings"], last["usage"])


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"stop": "zzzz"}, id="stop-bare-string"),
        pytest.param({"stop": ["zzzz", "yyyy"]}, id="stop-array"),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]},
            id="content-parts",
        ),
        pytest.param(
            {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
            id="developer-role",
        ),
        pytest.param({"extra_body": {"top_k": 20, "repeat_penalty": 1.1}}, id="rkllm-extensions"),
        pytest.param({"extra_body": {"some_future_field": {"x": 1}}}, id="unknown-field-ignored"),
    ],
)
def test_request_shapes_accepted(client, extra):
    kwargs = {"model": MODEL_ID, "messages": MESSAGES, "seed": SEED}
    kwargs.update(extra)
    c = client.chat.completions.create(**kwargs)
    assert c.choices[0].message.role == "assistant"
    assert c.usage.completion_tokens > 0


def test_error_envelope_for_malformed_json(daemon):
    with daemon.http() as http:
        r = http.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    err = check_error_envelope(r, 400)
    assert err["type"] == "invalid_request_error"


def test_error_envelope_for_wrong_field_type(daemon):
    with daemon.http() as http:
        r = http.post("/v1/chat/completions", json={"model": MODEL_ID, "messages": "not a list"})
    # docs/api.md: a field of the wrong type is 400 naming the field (never the framework's 422).
    err = check_error_envelope(r, 400, param="messages")
    assert err["type"] == "invalid_request_error"
