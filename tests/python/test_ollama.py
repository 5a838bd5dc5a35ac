"""The Ollama API and the model registry, through the official `ollama` client.

Models are `sim:` specs in `[[models]]` tables (fast, each with its own reply
length, so a reply shows which model produced it), or `.rkllm` files in a
models directory served through `dlopen` of the simulator's cdylib.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import httpx
import ollama
import pytest

from conftest import MODEL_ID, daemon_binary

A_TOKENS, B_TOKENS = 5, 3


def config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "rkllmd.toml"
    path.write_text(
        f"""
[[models]]
id = "a"
path = "sim:instant?reply_tokens={A_TOKENS}"
[[models]]
id = "b"
path = "sim:instant?reply_tokens={B_TOKENS}"
[[models]]
id = "broken"
path = "sim:instant?fail_init=npu_memory"
{extra}
"""
    )
    return str(path)


@pytest.fixture
def registry(start_daemon, tmp_path):
    return start_daemon(model=None, extra_args=("--config", config(tmp_path), "--max-loaded-models", "1"))


def client(d) -> ollama.Client:
    return ollama.Client(host=d.url, timeout=30)


def loaded(c: ollama.Client) -> list[str]:
    return [m.model for m in c.ps().models]


def check_durations(r) -> None:
    """Nanoseconds on one timeline: the parts fit in the whole."""
    for k in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(r[k], int) and r[k] >= 0, (k, r[k])
    assert r.prompt_eval_duration + r.eval_duration <= r.total_duration, r
    assert r.load_duration <= r.total_duration, r
    assert r.prompt_eval_count > 0, r


def test_list_show_and_ps(registry):
    c = client(registry)
    names = [m.model for m in c.list().models]
    assert names == ["a", "b", "broken"]
    assert all(m.details.format == "rkllm" and len(m.digest) == 64 for m in c.list().models)
    assert loaded(c) == [], "nothing is loaded before it is asked for"
    shown = c.show("a")
    assert "temperature" in shown.parameters and shown.modelinfo["rkllm.context_length"] == 4096
    # What the model can do, before it is loaded: every model embeds (llm-ollama registers
    # an embedding model on this); no template that knows <think>, so no thinking.
    assert {"completion", "embedding"} <= set(shown.capabilities) and "thinking" not in shown.capabilities
    c.chat(model="a", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert loaded(c) == ["a"]
    with pytest.raises(ollama.ResponseError) as e:
        c.show("nope")
    assert e.value.status_code == 404


def test_chat_stream_and_not(registry):
    c = client(registry)
    messages = [{"role": "user", "content": "Say something"}]
    whole = c.chat(model="a", messages=messages, stream=False)
    assert whole.done and whole.done_reason == "stop"
    assert whole.message.role == "assistant" and whole.message.content
    assert whole.eval_count == A_TOKENS
    check_durations(whole)
    assert whole.load_duration > 0, "the first request loaded the model"

    parts = list(c.chat(model="a", messages=messages, stream=True, options={"temperature": 0.5, "num_predict": 50}))
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content, "same reply either way"
    last = parts[-1]
    assert last.eval_count == A_TOKENS and last.done_reason == "stop"
    check_durations(last)
    assert last.load_duration == 0, "already loaded"


def test_generate_and_the_token_limit(registry):
    c = client(registry)
    r = c.generate(model="b", prompt="Why is the sky blue?", stream=False)
    assert r.response and r.done_reason == "stop" and r.eval_count == B_TOKENS
    check_durations(r)
    short = c.generate(model="a", prompt="Why?", options={"num_predict": 2}, stream=False)
    assert short.eval_count == 2 and short.done_reason == "length"
    raw = "".join(p.response for p in c.generate(model="a", prompt="raw text", raw=True, stream=True))
    assert raw


def test_keep_alive_zero_unloads_and_an_empty_prompt_loads(registry):
    c = client(registry)
    r = c.generate(model="b", prompt="")
    assert r.done and r.done_reason == "load" and r.response == ""
    assert loaded(c) == ["b"]
    r = c.generate(model="b", prompt="", keep_alive=0)
    assert r.done_reason == "unload"
    assert loaded(c) == []
    c.chat(model="a", messages=[{"role": "user", "content": "hi"}], keep_alive=0, stream=False)
    assert loaded(c) == [], "keep_alive 0 unloads once the reply is done"
    c.chat(model="a", messages=[{"role": "user", "content": "hi"}], keep_alive="-1", stream=False)
    assert [m.expires_at for m in c.ps().models] == [None], "kept forever"


def test_embed_and_the_legacy_embeddings(registry):
    c = client(registry)
    texts = ["The cat sat on the mat", "A cat on a mat", "Stock prices fell sharply today"]
    r = c.embed(model="a", input=texts)
    assert r.model == "a" and len(r.embeddings) == 3
    dot = lambda u, v: sum(x * y for x, y in zip(u, v))  # noqa: E731
    assert all(abs(dot(v, v) - 1.0) < 1e-4 for v in r.embeddings), "L2-normalised"
    assert dot(r.embeddings[0], r.embeddings[1]) > dot(r.embeddings[0], r.embeddings[2])
    assert r.prompt_eval_count > 0
    assert 0 <= r.load_duration <= r.total_duration, r
    assert c.embed(model="a", input=texts[2]).embeddings == [r.embeddings[2]]
    # `truncate` (default true) cuts to the context, here a num_ctx of 4 tokens; false refuses.
    long = "one two three four five six seven eight"
    assert c.embed(model="a", input=long, options={"num_ctx": 4}).prompt_eval_count == 4
    with pytest.raises(ollama.ResponseError) as e:
        c.embed(model="a", input=long, truncate=False, options={"num_ctx": 4})
    assert e.value.status_code == 400 and "tokens" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        c.embed(model="a", input="x", dimensions=3)
    assert e.value.status_code == 400 and "dimensions" in e.value.error
    # The legacy endpoint: one prompt, the pooled vector at its own length.
    legacy = c.embeddings(model="a", prompt=texts[2]).embedding
    norm = dot(legacy, legacy) ** 0.5
    assert [round(x / norm, 5) for x in legacy] == [round(x, 5) for x in r.embeddings[2]]


def test_errors(registry):
    c = client(registry)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="unknown", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 404 and "not found" in e.value.error
    with httpx.Client(base_url=registry.url) as http:
        bad = http.post("/api/chat", content=b'{"model": "a", "messages": [')
        assert bad.status_code == 400 and "error" in bad.json()
        images = http.post("/api/generate", json={"model": "a", "prompt": "x", "images": ["aGk="]})
        assert images.status_code == 400 and "vision" in images.json()["error"]
        # A num_ctx past the model's context is capped at it, as Ollama caps it.
        ctx = http.post("/api/generate", json={"model": "a", "prompt": "x", "stream": False, "options": {"num_ctx": 99999}})
        assert ctx.status_code == 200 and ctx.json()["done"], ctx.text
        version = http.get("/api/version").json()["version"]
        assert version


def test_a_model_that_fails_to_load_leaves_the_others_serving(start_daemon, tmp_path):
    d = start_daemon(model=None, extra_args=("--config", config(tmp_path), "--max-loaded-models", "2"))
    c = client(d)
    c.chat(model="a", messages=[{"role": "user", "content": "hi"}], stream=False)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="broken", messages=[{"role": "user", "content": "hi"}], stream=False)
    # 503: nothing ran, a balancer may try another board (docs/api.md, "Errors").
    assert e.value.status_code == 503 and "npu memory" in e.value.error
    assert c.chat(model="a", messages=[{"role": "user", "content": "again"}], stream=False).eval_count == A_TOKENS
    assert loaded(c) == ["a"]
    with d.http() as http:
        card = http.get("/v1/models/broken").json()
        assert card["state"] == "unloaded"


def test_concurrent_requests_for_two_models_share_one_slot(start_daemon, tmp_path):
    """With room for one model, requests for two take turns: each waits until
    the other model is idle, evicts it and loads its own. The simulator's
    record of init and destroy calls shows both: models were swapped, and
    never two were alive at once."""
    record = tmp_path / "calls.jsonl"
    d = start_daemon(
        model=None,
        extra_args=("--config", config(tmp_path), "--max-loaded-models", "1"),
        env={"RKLLM_SIM_RECORD": str(record)},
    )
    c = client(d)
    results: dict[int, object] = {}

    def ask(i: int, model: str) -> None:
        try:
            results[i] = (model, c.chat(model=model, messages=[{"role": "user", "content": f"q{i}"}], stream=False))
        except Exception as e:  # reported below
            results[i] = e

    threads = [threading.Thread(target=ask, args=(i, "ab"[i % 2])) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 6
    for i, r in results.items():
        assert isinstance(r, tuple), f"request {i}: {r}"
        model, reply = r
        assert reply.model == model and reply.eval_count == {"a": A_TOKENS, "b": B_TOKENS}[model]
    assert len(loaded(c)) == 1
    calls = [json.loads(line)["call"] for line in record.read_text().splitlines()]
    lifecycle = [call for call in calls if call in ("init", "destroy")]
    alive, most = 0, 0
    for call in lifecycle:
        alive += 1 if call == "init" else -1
        most = max(most, alive)
    assert most == 1, f"two models were loaded at once: {lifecycle}"
    assert lifecycle.count("init") >= 2 and lifecycle.count("destroy") >= 1, f"no eviction: {lifecycle}"


def test_openai_surface_lists_states_and_loads_and_unloads(registry):
    with registry.http() as http:
        models = http.get("/v1/models").json()["data"]
        assert [(m["id"], m["state"]) for m in models] == [("a", "unloaded"), ("b", "unloaded"), ("broken", "unloaded")]
        card = http.post("/v1/models/b/load").json()
        assert card["state"] == "loaded" and card["loaded_since"] > 0
        r = http.post("/v1/chat/completions", json={"model": "a", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["model"] == "a"
        assert http.get("/v1/models/b").json()["state"] == "unloaded", "a evicted b"
        assert http.post("/v1/models/a/unload").json()["state"] == "unloaded"
        assert http.post("/v1/models/nope/load").status_code == 404


def cdylib() -> Path:
    # `cargo test --workspace` builds it into deps/; `cargo build` beside the binary.
    target = daemon_binary().parent
    for lib in (target / "deps" / "librkllm_sim.so", target / "librkllm_sim.so"):
        if lib.is_file():
            return lib
    pytest.fail(f"librkllm_sim.so not built in {target}: run the tests with `cargo test --workspace`", pytrace=False)


def test_models_dir_through_dlopen_evicts_the_least_recently_used(start_daemon, tmp_path):
    models = tmp_path / "models"
    (models / "second").mkdir(parents=True)
    (models / "first.rkllm").write_bytes(b"weights")
    (models / "second" / "second.rkllm").write_bytes(b"weights")
    record = tmp_path / "calls.jsonl"
    d = start_daemon(
        model=None,
        backend="rkllm",
        extra_args=("--lib", str(cdylib()), "--models-dir", str(models), "--max-loaded-models", "1", "--template", "chatml"),
        env={"RKLLM_SIM_PROFILE": "instant", "RKLLM_SIM_REPLY_TOKENS": "4", "RKLLM_SIM_RECORD": str(record)},
    )
    c = client(d)
    assert [m.model for m in c.list().models] == ["first", "second"]
    for model in ["first", "second", "first"]:
        r = c.chat(model=model, messages=[{"role": "user", "content": "hi"}], stream=False)
        assert r.eval_count == 4
        assert loaded(c) == [model], "the second model evicted the first"
    with d.http() as http:
        assert http.get("/health").json()["runtime"]["backend"] == "rkllm"
    calls = [json.loads(line)["call"] for line in record.read_text().splitlines()]
    assert calls.count("init") == 3
    assert calls.count("destroy") == 2, "every unloaded model was destroyed"


# Home Assistant's Ollama integration: a system prompt, its intent tools, keep_alive "-1s" and
# options {"num_ctx": 8192} on every chat, streamed; the tool's result goes back as a `tool` message.
HA_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "area": {"type": "string"}, "domain": {"type": "array", "items": {"type": "string"}}},
                "required": [],
            },
        },
    }
    for name, description in [("HassTurnOn", "Turns on/opens a device or entity"), ("HassTurnOff", "Turns off/closes a device or entity")]
]
HA_CALL = '<tool_call>\n{"name": "HassTurnOn", "arguments": {"name": "kitchen light"}}\n</tool_call>'
HA_RESULT = "Turned on the kitchen light"
HA_ANSWER = "The kitchen light is on."
HA_MESSAGES = [
    {"role": "system", "content": "You are a voice assistant for Home Assistant. Answer in plain text."},
    {"role": "user", "content": "turn on the kitchen light"},
]
_OLLAMA_ADDRESS = re.compile(r"Ollama clients' address: (http://[0-9.]+:[0-9]+)")


def ollama_address(d) -> str:
    """The `--ollama-listen` address, from its log line (before the main "listening on")."""
    m = _OLLAMA_ADDRESS.search(d.output())
    assert m, d.output()
    return m.group(1)


def test_home_assistant_without_a_key_on_the_ollama_address_of_a_keyed_daemon(start_daemon, tmp_path):
    script = tmp_path / "script.json"
    # First match wins: the follow-up's prompt holds both texts.
    script.write_text(json.dumps([{"match": HA_RESULT, "reply": HA_ANSWER}, {"match": "kitchen light", "reply": HA_CALL}]))
    d = start_daemon(model=f"sim:instant?script={script}", api_key="secret", extra_args=("--ollama-listen", "127.0.0.1:0"))
    address = ollama_address(d)
    assert address != d.url

    # The main address wants the key on every API route, Ollama's too.
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=d.url, timeout=30).list()
    assert e.value.status_code == 401
    assert ollama.Client(host=d.url, timeout=30, headers={"Authorization": "Bearer secret"}).list().models

    # The Ollama address: no key. Home Assistant lists the models when it is set up.
    c = ollama.Client(host=address, timeout=30)
    assert [m.model for m in c.list().models] == [MODEL_ID]
    common = dict(model=MODEL_ID, tools=HA_TOOLS, keep_alive="-1s", options={"num_ctx": 8192})
    whole = c.chat(messages=HA_MESSAGES, stream=False, **common)
    (call,) = whole.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("HassTurnOn", {"name": "kitchen light"})
    follow_up = [
        *HA_MESSAGES,
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "HassTurnOn", "arguments": {"name": "kitchen light"}}}]},
        {"role": "tool", "content": json.dumps({"success": True, "result": HA_RESULT})},
    ]
    parts = list(c.chat(messages=follow_up, stream=True, **common))
    assert "".join(p.message.content for p in parts) == HA_ANSWER, "the tool's result reached the prompt"
    assert parts[-1].done and parts[-1].done_reason == "stop"
    assert [m.expires_at for m in c.ps().models] == [None], "keep_alive -1s: kept loaded"

    # What VS Code Copilot reads there: a version it accepts (>= 0.6.4), the OpenAI chat and models.
    with httpx.Client(base_url=address, timeout=30) as http:
        assert http.get("/").text == "Ollama is running", "as Ollama answers a probe"
        v = http.get("/api/version").json()
        assert tuple(int(x) for x in v["version"].split(".")) >= (0, 6, 4), v
        assert v["rkllmd_version"] and v["rkllmd_version"] != v["version"], v
        chat = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}]}
        assert http.post("/v1/chat/completions", json=chat).status_code == 200
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == [MODEL_ID]
        # Only those: the rest of the API stays behind the key on the main address.
        assert http.post("/v1/completions", json={"model": MODEL_ID, "prompt": "hi"}).status_code == 404
    with httpx.Client(base_url=d.url, timeout=30) as http:
        assert http.post("/v1/chat/completions", json=chat).status_code == 401
        assert http.get("/api/version").status_code == 401


def test_the_ollama_address_takes_a_key_of_its_own(start_daemon):
    d = start_daemon(api_key="main", extra_args=("--ollama-listen", "127.0.0.1:0", "--ollama-api-key", "ollama"))
    address = ollama_address(d)
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=address, timeout=30, headers={"Authorization": "Bearer main"}).list()
    assert e.value.status_code == 401, "the main key does not open the Ollama address"
    assert ollama.Client(host=address, timeout=30, headers={"Authorization": "Bearer ollama"}).list().models
