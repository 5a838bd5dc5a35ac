"""Embeddings through the official SDK and LangChain: float and base64,
batch order and `index`, usage, and the OpenAI error envelope."""

from __future__ import annotations

import base64
import math
import struct

import openai
import pytest

from checks import check_error_envelope
from conftest import MODEL_ID

TEXTS = ["The cat sat on the mat", "A cat on a mat", "Stock prices fell sharply today"]


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_float_batch_keeps_order_and_index(client):
    r = client.embeddings.create(model=MODEL_ID, input=TEXTS, encoding_format="float")
    assert [d.index for d in r.data] == [0, 1, 2]
    vectors = [d.embedding for d in r.data]
    for v in vectors:
        assert math.isclose(dot(v, v), 1.0, rel_tol=1e-4)
    assert dot(vectors[0], vectors[1]) > dot(vectors[0], vectors[2])
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens
    # The same text alone gives the same vector as in the batch.
    alone = client.embeddings.create(model=MODEL_ID, input=TEXTS[2], encoding_format="float")
    assert alone.data[0].embedding == vectors[2]


def test_base64_decodes_to_the_float_vector(client, daemon):
    floats = client.embeddings.create(model=MODEL_ID, input="red apples", encoding_format="float").data[0].embedding
    # The SDK asks for base64 by default and decodes it itself.
    by_default = client.embeddings.create(model=MODEL_ID, input="red apples").data[0].embedding
    assert [round(x, 6) for x in by_default] == [round(x, 6) for x in floats]
    with daemon.http() as http:
        raw = http.post("/v1/embeddings", json={"model": MODEL_ID, "input": "red apples", "encoding_format": "base64"})
    data = base64.b64decode(raw.json()["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(data) // 4}f", data)
    assert [round(x, 6) for x in decoded] == [round(x, 6) for x in floats]


def test_empty_input_is_a_400_envelope(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL_ID, input=[], encoding_format="float")
    check_error_envelope(e.value.response, 400)


def test_langchain_openai_embeddings(daemon):
    from langchain_openai import OpenAIEmbeddings

    emb = OpenAIEmbeddings(
        model=MODEL_ID,
        base_url=daemon.base_url,
        api_key="sk-no-key-required",
        # Send the texts as they are (no tiktoken re-chunking: not an OpenAI model).
        check_embedding_ctx_length=False,
    )
    docs = emb.embed_documents(TEXTS)
    assert len(docs) == 3
    query = emb.embed_query("a cat on the mat")
    scores = [dot(query, d) for d in docs]
    assert scores.index(max(scores)) in (0, 1), scores
    assert scores[2] < min(scores[0], scores[1])
