"""Legacy `POST /v1/completions` through the official SDK."""

from __future__ import annotations

import json
import time

from checks import check_timings, check_usage
from conftest import MODEL_ID, REPLY_TOKENS


def test_legacy_completion_max_tokens(client):
    t0 = time.time()
    raw = client.completions.with_raw_response.create(model=MODEL_ID, prompt="Say hi", max_tokens=5)
    t1 = time.time()
    c = raw.parse()
    assert isinstance(c.id, str) and c.id
    assert c.object == "text_completion"
    assert t0 - 2 <= c.created <= t1 + 2
    assert c.model == MODEL_ID
    assert len(c.choices) == 1
    assert c.choices[0].index == 0
    assert isinstance(c.choices[0].text, str)
    assert c.choices[0].finish_reason == "length"
    assert c.usage.completion_tokens == 5
    assert c.usage.prompt_tokens > 0
    assert c.usage.total_tokens == c.usage.prompt_tokens + 5

    body = json.loads(raw.text)
    check_usage(body["usage"], completion_tokens=5)
    check_timings(body["timings"], body["usage"])


def test_legacy_completion_default_max_tokens_is_not_tiny(client):
    # max_tokens defaults to 16 on /v1/completions; the sim replies with 8 tokens.
    c = client.completions.create(model=MODEL_ID, prompt="Say hi")
    assert c.usage.completion_tokens == REPLY_TOKENS
    assert c.choices[0].finish_reason == "stop"


def test_legacy_completion_stream(client):
    full = client.completions.create(model=MODEL_ID, prompt="Say hi", max_tokens=5, seed=7)
    chunks = list(client.completions.create(model=MODEL_ID, prompt="Say hi", max_tokens=5, seed=7, stream=True))
    assert chunks
    assert len({c.id for c in chunks}) == 1
    with_choices = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in with_choices) == full.choices[0].text
    assert with_choices[-1].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.usage is not None and last.usage.completion_tokens == 5
