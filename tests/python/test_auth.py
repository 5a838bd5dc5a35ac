"""`--api-key`: bearer auth on the API, none on /health."""

from __future__ import annotations

import openai
import pytest

from checks import check_error_envelope
from conftest import MODEL_ID

KEY = "sekrit"
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def secured(start_daemon):
    return start_daemon(api_key=KEY)


def test_wrong_key_is_rejected(secured):
    with secured.client(api_key="wrong") as c:
        with pytest.raises(openai.AuthenticationError) as ei:
            c.chat.completions.create(model=MODEL_ID, messages=MESSAGES)
    check_error_envelope(ei.value, 401)
    with secured.client(api_key="wrong") as c:
        with pytest.raises(openai.AuthenticationError):
            c.models.list()


def test_missing_key_is_rejected(secured):
    with secured.http(api_key="") as http:
        r = http.post("/v1/chat/completions", json={"model": MODEL_ID, "messages": MESSAGES})
    check_error_envelope(r, 401)


def test_right_key_works(secured):
    with secured.client(api_key=KEY) as c:
        out = c.chat.completions.create(model=MODEL_ID, messages=MESSAGES)
        assert out.choices[0].message.content
        assert MODEL_ID in [m.id for m in c.models.list().data]


def test_health_needs_no_key(secured):
    assert secured.health()["status"] == "ok"
