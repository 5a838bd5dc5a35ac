"""Health and model listing."""

from __future__ import annotations

import gzip

import openai
import pytest

from checks import check_error_envelope
from conftest import MODEL_ID


def test_health(daemon):
    h = daemon.health()
    assert h["status"] == "ok"
    assert h["backend"] == "sim"
    q = h["queue"]
    for k in ("running", "waiting", "capacity"):
        assert isinstance(q.get(k), int) and not isinstance(q.get(k), bool), f"queue.{k}: {q}"
        assert q[k] >= 0, q
    assert q["capacity"] >= 1, q


def test_models_list(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert MODEL_ID in ids, ids
    m = next(m for m in models.data if m.id == MODEL_ID)
    assert m.object == "model"
    assert isinstance(m.created, int) and m.created > 1_000_000_000, f"created must be a real time, got {m.created}"
    assert isinstance(m.owned_by, str) and m.owned_by


def test_models_list_raw_shape(daemon):
    with daemon.http() as http:
        r = http.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert isinstance(body["data"], list)


def test_model_retrieve(client):
    m = client.models.retrieve(MODEL_ID)
    assert m.id == MODEL_ID
    assert m.object == "model"


def test_model_retrieve_unknown(client):
    with pytest.raises(openai.NotFoundError) as ei:
        client.models.retrieve("no-such-model")
    check_error_envelope(ei.value, 404)


def test_openapi_document(daemon):
    with daemon.http() as http:
        r = http.get("/openapi.json")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert str(doc.get("openapi", "")).startswith("3."), doc.get("openapi")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health"):
        assert path in doc["paths"], f"{path} missing from /openapi.json"


def test_swagger_ui_is_served_from_the_vendored_files(daemon):
    from conftest import REPO_ROOT

    assets = REPO_ROOT / "assets" / "swagger-ui"
    with daemon.http() as http:
        r = http.get("/docs", follow_redirects=True)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")
        assert 'url: "/openapi.json"' in r.text
        for name, ctype in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css")):
            a = http.get(f"/docs/{name}")
            assert a.status_code == 200, name
            assert ctype in a.headers["content-type"], (name, a.headers["content-type"])
            # Vendored gzipped and sent with Content-Encoding: gzip; httpx decodes it like a browser.
            assert a.headers["content-encoding"] == "gzip"
            vendored = gzip.decompress((assets / f"{name}.gz").read_bytes())
            assert a.content == vendored, f"/docs/{name} differs from assets/swagger-ui/{name}.gz"
