//! Embeddings and reranking through the binary on the simulator: order,
//! pooling, normalisation, scores, the refusals, and what reached the runtime.

mod common;
use common::*;
use serde_json::{json, Value};

fn start(extra: &[&str], record: Option<&std::path::Path>) -> Daemon {
    let spec = match record {
        Some(path) => format!("sim:instant?record={}", path.display()),
        None => "sim:instant".to_owned(),
    };
    let mut args = vec!["--backend", "sim", "--model", &spec, "--model-id", "m"];
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

fn vector(item: &Value) -> Vec<f64> {
    item["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

async fn embed(d: &Daemon, body: Value) -> (u16, Value) {
    let r = d.post("/v1/embeddings", body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn embeddings_keep_order_are_unit_length_and_rank_shared_words_closer() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let d = start(&[], Some(record.path()));
    let texts = ["The cat sat on the mat", "A cat on a mat", "Stock prices fell sharply today"];
    let (status, body) = embed(&d, json!({"model": "m", "input": texts})).await;
    assert_eq!(status, 200, "{body}");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let vectors: Vec<Vec<f64>> = data.iter().map(vector).collect();
    for (i, item) in data.iter().enumerate() {
        assert_eq!((item["index"].as_u64(), item["object"].as_str()), (Some(i as u64), Some("embedding")));
        assert!(close(dot(&vectors[i], &vectors[i]), 1.0, 1e-4), "not normalised");
    }
    assert!(dot(&vectors[0], &vectors[1]) > dot(&vectors[0], &vectors[2]) + 0.2);
    let tokens: usize = texts.iter().map(|t| rkllm_sim::token_ids(t).len()).sum();
    assert_eq!(body["usage"]["prompt_tokens"].as_u64(), Some(tokens as u64));
    assert_eq!(body["model"], "m");
    // One text alone gets the same vector as in the batch; its token ids too.
    let (_, one) = embed(&d, json!({"model": "m", "input": texts[2]})).await;
    assert_eq!(vector(&one["data"][0]), vectors[2]);
    let ids: Vec<u32> = rkllm_sim::token_ids(texts[1]);
    let (_, by_ids) = embed(&d, json!({"model": "m", "input": [ids]})).await;
    assert_eq!(vector(&by_ids["data"][0]), vectors[1]);
    // Every run was a hidden-layer run whose buffer was released at once.
    let lines: Vec<Value> =
        std::fs::read_to_string(record.path()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let outputs: Vec<&Value> = lines.iter().filter(|l| l["call"] == "output").collect();
    assert_eq!(outputs.len(), 5);
    assert!(outputs.iter().all(|o| o["released"] == true && o["mode"] == "hidden_layer"), "{outputs:?}");
}

#[tokio::test]
async fn base64_is_the_float_vector_and_mean_pooling_ranks_alike() {
    let d = start(&["--embedding-pooling", "mean"], None);
    let (_, floats) = embed(&d, json!({"model": "m", "input": "red apples"})).await;
    let (_, b64) = embed(&d, json!({"model": "m", "input": "red apples", "encoding_format": "base64"})).await;
    use base64::Engine as _;
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(b64["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let from_json: Vec<f32> = vector(&floats["data"][0]).into_iter().map(|x| x as f32).collect();
    assert_eq!(decoded, from_json);
    let texts = ["red apples are sweet", "sweet red apples", "the train left late"];
    let (_, body) = embed(&d, json!({"model": "m", "input": texts})).await;
    let v: Vec<Vec<f64>> = body["data"].as_array().unwrap().iter().map(vector).collect();
    assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.2);
}

#[tokio::test]
async fn bad_inputs_are_refused_with_the_envelope() {
    let d = start(&["--max-context-len", "64", "--max-new-tokens", "16"], None);
    let long = "word ".repeat(200);
    let many: Vec<&str> = vec!["x"; 2049];
    for (body, param) in [
        (json!({"model": "m", "input": []}), "input"),
        (json!({"model": "m", "input": ""}), "input"),
        (json!({"model": "m", "input": many}), "input"),
        (json!({"model": "m", "input": long}), "input"),
        (json!({"model": "m", "input": "hi", "dimensions": 3}), "dimensions"),
        // Outside the tokenizer's vocabulary (the runtime would fail the run: a 500).
        (json!({"model": "m", "input": [[1, 2, 1_000_000]]}), "input"),
        (json!({"model": "m", "input": [-1]}), "input"),
    ] {
        let (status, err) = embed(&d, body).await;
        assert_eq!(status, 400, "{err}");
        assert_eq!(err["error"]["type"], "invalid_request_error");
        assert_eq!(err["error"]["param"], param, "{err}");
    }
    let (status, err) = embed(&d, json!({"model": "nope", "input": "hi"})).await;
    assert_eq!((status, err["error"]["code"].as_str()), (404, Some("model_not_found")));
    let (status, _) = embed(&d, json!({"model": "m", "input": "hi", "dimensions": rkllm_sim::EMBD_SIZE})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn rerank_orders_by_relevance_with_top_n_and_documents() {
    let d = start(&[], None);
    let documents =
        ["Stock markets fell sharply today", "Red apples are sweet and red apples are crisp", "I like trains"];
    for path in ["/v1/rerank", "/rerank"] {
        let r = d
            .post(path, json!({"model": "m", "query": "sweet red apples", "documents": documents, "top_n": 2, "return_documents": true}))
            .await;
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{body}");
        assert_eq!(results[0]["index"], 1, "{body}");
        assert_eq!(results[0]["document"]["text"], documents[1]);
        let scores: Vec<f64> = results.iter().map(|r| r["relevance_score"].as_f64().unwrap()).collect();
        assert!(scores[0] > scores[1] && scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
        assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    }
    let r = d.post("/v1/rerank", json!({"model": "m", "query": "q", "documents": []})).await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn rerank_without_a_tokenizer_says_why() {
    // The simulator loaded as a library brings no tokenizer.json.
    let d = Daemon::start_dlopen(&["--model", "sim:instant", "--model-id", "m"]);
    let r = d.post("/v1/rerank", json!({"model": "m", "query": "q", "documents": ["d"]})).await;
    assert_eq!(r.status(), 501);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("tokenizer.json"), "{body}");
    // Embeddings still work: the runtime tokenizes the text.
    let (status, body) = embed(&d, json!({"model": "m", "input": "red apples"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"].as_u64(), Some(rkllm_sim::token_ids("red apples").len() as u64));
}

async fn ollama(d: &Daemon, path: &str, body: Value) -> (u16, Value) {
    let r = d.client().post(format!("{}{path}", d.url)).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[tokio::test]
async fn ollama_embed_is_the_openai_vector_and_truncates_exactly() {
    let d = start(&["--max-context-len", "64", "--max-new-tokens", "16"], None);
    let texts = ["The cat sat on the mat", "Stock prices fell sharply today"];
    let (status, body) = ollama(&d, "/api/embed", json!({"model": "m", "input": texts})).await;
    assert_eq!(status, 200, "{body}");
    let (_, openai) = embed(&d, json!({"model": "m", "input": texts})).await;
    let embeddings = body["embeddings"].as_array().unwrap();
    assert_eq!(embeddings.len(), 2);
    for (i, v) in embeddings.iter().enumerate() {
        assert_eq!(floats(v), vector(&openai["data"][i]), "input {i}");
    }
    let tokens: usize = texts.iter().map(|t| rkllm_sim::token_ids(t).len()).sum();
    assert_eq!(body["prompt_eval_count"].as_u64(), Some(tokens as u64));
    let (total, load) = (body["total_duration"].as_u64().unwrap(), body["load_duration"].as_u64().unwrap());
    assert!(total > 0 && load <= total, "{body}");
    // One string is one input.
    let (_, one) = ollama(&d, "/api/embed", json!({"model": "m", "input": texts[1]})).await;
    assert_eq!(one["embeddings"][0], body["embeddings"][1]);

    // Too long: cut to the first 64 tokens by default, exactly those the runtime would read.
    let long: String = (0..100).map(|i| format!("w{i} ")).collect();
    let ids = rkllm_sim::token_ids(&long);
    assert!(ids.len() > 64);
    let (status, cut) = ollama(&d, "/api/embed", json!({"model": "m", "input": long})).await;
    assert_eq!(status, 200, "{cut}");
    assert_eq!(cut["prompt_eval_count"], 64);
    let (_, first_64) = embed(&d, json!({"model": "m", "input": [ids[..64].to_vec()]})).await;
    assert_eq!(floats(&cut["embeddings"][0]), vector(&first_64["data"][0]));
    // A smaller num_ctx cuts shorter; a larger one than the model's is capped at it (as Ollama does).
    let (_, ctx) = ollama(&d, "/api/embed", json!({"model": "m", "input": long, "options": {"num_ctx": 8}})).await;
    assert_eq!(ctx["prompt_eval_count"], 8);
    let (status, ctx) =
        ollama(&d, "/api/embed", json!({"model": "m", "input": long, "options": {"num_ctx": 65}})).await;
    assert_eq!((status, ctx["prompt_eval_count"].as_u64()), (200, Some(64)), "{ctx}");
    // 0 is no setting (llama.cpp's "the model's"), not an empty context.
    let (status, ctx) = ollama(&d, "/api/embed", json!({"model": "m", "input": long, "options": {"num_ctx": 0}})).await;
    assert_eq!((status, ctx["prompt_eval_count"].as_u64()), (200, Some(64)), "{ctx}");
    for (body, word) in [
        (json!({"model": "m", "input": long, "truncate": false}), "tokens"),
        (json!({"model": "m", "input": "hi", "dimensions": 3}), "dimensions"),
        (json!({"model": "m", "input": ["hi", ""]}), "empty"),
    ] {
        let (status, err) = ollama(&d, "/api/embed", body).await;
        assert_eq!(status, 400, "{err}");
        assert!(err["error"].as_str().unwrap().contains(word), "{err}");
    }
    let (status, err) = ollama(&d, "/api/embed", json!({"model": "nope", "input": "hi"})).await;
    assert_eq!((status, err["error"].as_str()), (404, Some("model 'nope' not found")));
    // No input only loads the model.
    let (status, loaded) = ollama(&d, "/api/embed", json!({"model": "m", "input": []})).await;
    assert_eq!((status, loaded["embeddings"].as_array().map(Vec::len)), (200, Some(0)), "{loaded}");
    // A load's `dimensions` is held to the width the model has shown, as the document states it.
    let (status, err) = ollama(&d, "/api/embed", json!({"model": "m", "dimensions": 3})).await;
    assert_eq!(status, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("dimensions"), "{err}");
    // And its `options` to their ranges, though none but `num_ctx` applies here.
    let (status, err) = ollama(&d, "/api/embed", json!({"model": "m", "options": {"top_p": 2.0}})).await;
    assert_eq!(status, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("top_p"), "{err}");
}

#[tokio::test]
async fn ollama_legacy_embeddings_are_the_pooled_vector_unnormalised() {
    let d = start(&[], None);
    let (status, legacy) = ollama(&d, "/api/embeddings", json!({"model": "m", "prompt": "red apples"})).await;
    assert_eq!(status, 200, "{legacy}");
    let raw = floats(&legacy["embedding"]);
    let norm = dot(&raw, &raw).sqrt();
    assert!(norm > 0.0 && !close(norm, 1.0, 1e-3), "the legacy vector is not normalised: |v| = {norm}");
    let (_, new) = ollama(&d, "/api/embed", json!({"model": "m", "input": "red apples"})).await;
    let unit = floats(&new["embeddings"][0]);
    assert!(raw.iter().zip(&unit).all(|(r, u)| close(r / norm, *u, 1e-6)), "same direction");
    let (status, empty) = ollama(&d, "/api/embeddings", json!({"model": "m", "prompt": ""})).await;
    assert_eq!((status, empty), (200, json!({"embedding": []})));
}

#[tokio::test]
async fn ollama_embed_without_a_tokenizer_refuses_to_guess_a_cut() {
    let lib = sim_cdylib();
    let args = ["--backend", "rkllm", "--lib", lib.to_str().unwrap(), "--model", "sim:instant", "--model-id", "m"];
    let d = Daemon::start(&[&args[..], &["--max-context-len", "64", "--max-new-tokens", "16"]].concat());
    let long = "word ".repeat(20);
    let (status, err) = ollama(&d, "/api/embed", json!({"model": "m", "input": long})).await;
    assert_eq!(status, 400, "{err}");
    assert!(err["error"].as_str().unwrap().contains("tokenizer.json"), "{err}");
    let (status, body) = ollama(&d, "/api/embed", json!({"model": "m", "input": "red apples"})).await;
    assert_eq!(status, 200, "a text shorter than the context in bytes fits: {body}");
}
