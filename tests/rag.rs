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
    let lib = sim_cdylib();
    let d = Daemon::start(&[
        "--backend",
        "rkllm",
        "--lib",
        lib.to_str().unwrap(),
        "--model",
        "sim:instant",
        "--model-id",
        "m",
    ]);
    let r = d.post("/v1/rerank", json!({"model": "m", "query": "q", "documents": ["d"]})).await;
    assert_eq!(r.status(), 501);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("tokenizer.json"), "{body}");
    // Embeddings still work: the runtime tokenizes the text.
    let (status, body) = embed(&d, json!({"model": "m", "input": "red apples"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"].as_u64(), Some(rkllm_sim::token_ids("red apples").len() as u64));
}
