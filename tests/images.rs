//! Images through the binary over HTTP, on the simulated LLM and encoder:
//! each refusal's 400, the context check with images, the embedding cache
//! (encoder runs counted by /metrics), ABI 1.2's tags at init, a models
//! directory's encoder pairing, and an encoder failure reported.

mod common;
use common::*;
use serde_json::{json, Value};

const VL: &str = "sim:qwen2.5-vl-3b?time_scale=0";
/// The id every test serves the model as.
const ID: [&str; 2] = ["--model-id", "m"];

fn image(url: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": url}})
}

fn with_images(urls: &[String]) -> Value {
    let mut parts: Vec<Value> = urls.iter().map(|u| image(u)).collect();
    parts.push(json!({"type": "text", "text": "What is this?"}));
    json!({"model": "m", "messages": [{"role": "user", "content": parts}]})
}

async fn chat(d: &Daemon, body: Value) -> (u16, Value) {
    let r = d.post("/v1/chat/completions", body).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"].as_str().unwrap_or_else(|| panic!("no content: {body}"))
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn each_bad_image_is_a_400_and_the_daemon_keeps_serving() {
    let d = Daemon::start(&[
        ID[0],
        ID[1],
        "--model",
        VL,
        "--max-images",
        "2",
        "--max-image-bytes",
        "100000",
        "--max-image-pixels",
        "1000000",
    ]);
    let red = data_url(&png(8, 8, [255, 0, 0]));
    let mut cut = png(64, 64, [1, 2, 3]);
    cut.truncate(cut.len() - 20);
    let zeros = data_url(&vec![0u8; 150_000]);
    // JPEGs cut to half their length, decoded whole (600×400) and at a DCT scale (900×800).
    let cut_jpeg = |w: u32, h: u32| {
        let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 7 + y) as u8, (y * 3) as u8, (x ^ y) as u8]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
        let mut jpeg = out.into_inner();
        jpeg.truncate(jpeg.len() / 2);
        data_url(&jpeg)
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (with_images(&[data_url(&cut)]), "invalid_image", "messages[0].content[0].image_url"),
        (with_images(&[cut_jpeg(600, 400)]), "invalid_image", "messages[0].content[0].image_url"),
        (with_images(&[cut_jpeg(900, 800)]), "invalid_image", "messages[0].content[0].image_url"),
        (with_images(&["data:image/png;base64,@@@@".into()]), "invalid_image", "messages[0].content[0].image_url"),
        (with_images(&[data_url(b"plain text, not an image")]), "invalid_image", "messages[0].content[0].image_url"),
        (with_images(&["https://example.com/cat.png".into()]), "invalid_image", "messages[0].content[0].image_url"),
        (with_images(&[red.clone(), red.clone(), red.clone()]), "too_many_images", "messages[0].content[2].image_url"),
        (with_images(&[zeros]), "image_too_large", "messages[0].content[0].image_url"),
        (with_images(&[data_url(&png(1001, 1000, [0; 3]))]), "image_too_large", "messages[0].content[0].image_url"),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "a literal <image> marker"}]}),
            "invalid_value",
            "messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "content": [image(&red)]}, {"role": "user", "content": "hi"}]}),
            "invalid_value",
            "messages[0].content[0]",
        ),
    ];
    for (body, code, param) in cases {
        let (status, reply) = chat(&d, body).await;
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["code"], code, "{reply}");
        assert_eq!(reply["error"]["param"], param, "{reply}");
    }
    let (status, reply) = chat(&d, with_images(&[red])).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #ff0000 (392x392).");
}

#[tokio::test]
async fn the_context_check_counts_the_images() {
    let d = Daemon::start(&[ID[0], ID[1], "--model", VL, "--max-context-len", "400", "--max-new-tokens", "100"]);
    let urls = [data_url(&png(4, 4, [0, 0, 0])), data_url(&png(4, 4, [255; 3]))];
    let (status, reply) = chat(&d, with_images(&urls[..1])).await;
    assert_eq!(status, 200, "one image (198 tokens) fits: {reply}");
    let (status, reply) = chat(&d, with_images(&urls)).await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["code"], "context_length_exceeded");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("2 images take 396 of those tokens (198 each"), "{message}");
}

#[tokio::test]
async fn the_encoder_runs_once_per_distinct_image() {
    let d = Daemon::start(&[ID[0], ID[1], "--model", VL]);
    let (a, b) = (data_url(&png(10, 10, [10, 20, 30])), data_url(&png(12, 12, [200, 100, 0])));
    let (_, first) = chat(&d, with_images(&[a.clone(), b.clone()])).await;
    assert_eq!(content(&first), "I see 2 images: image 1 is #0a141e (392x392), image 2 is #c86400 (392x392).");
    // The same pictures again (b re-encoded at another size: the same pixels after resizing), and a twice.
    let b_again = data_url(&png(24, 24, [200, 100, 0]));
    let (_, second) = chat(&d, with_images(&[b_again, a.clone(), a])).await;
    assert_eq!(
        content(&second),
        "I see 3 images: image 1 is #c86400 (392x392), image 2 is #0a141e (392x392), image 3 is #0a141e (392x392)."
    );
    assert_eq!(second["timings"]["images"]["encoder_runs"], 0, "{}", second["timings"]);
    assert_eq!(second["timings"]["images"]["cache_hits"], 3);
    assert_eq!(second["usage"]["prompt_tokens"], second["timings"]["runtime"]["prefill_tokens"]);
    let metrics = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&metrics, "rkllmd_image_encoder_runs_total"), 2.0);
    assert_eq!(metric(&metrics, "rkllmd_image_cache_hits_total"), 3.0);
    assert_eq!(metric(&metrics, "rkllmd_image_encoder_seconds_count"), 1.0, "the second request ran no encoder");
}

/// MIME-style base64 (a line break every 76 characters) is the same image.
#[tokio::test]
async fn base64_with_line_breaks_is_the_same_image() {
    let d = Daemon::start(&[ID[0], ID[1], "--model", VL]);
    let url = data_url(&png(20, 20, [40, 80, 120]));
    let (head, data) = url.split_once(',').unwrap();
    let lines: Vec<&str> = data.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect();
    let (status, reply) = chat(&d, with_images(&[format!("{head},{}", lines.join("\r\n"))])).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #285078 (392x392).");
}

#[tokio::test]
async fn abi_1_2_takes_the_tags_at_init() {
    let d = Daemon::start(&[ID[0], ID[1], "--model", VL, "--runtime-abi", "1.2"]);
    let (status, reply) = chat(&d, with_images(&[data_url(&png(5, 5, [0, 255, 0]))])).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #00ff00 (392x392).");
}

/// A client that leaves while its image is being encoded does not free the
/// NPU turn before the encoder returns: the next run must not start while
/// the encoder still uses the NPU (it did, when the turn went with the
/// client's dropped request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_encode_keeps_the_turn_until_the_encoder_returns() {
    // The simulated encoder takes 2,930 ms × time_scale: ~880 ms here, in
    // which the gauge polled (every 10 ms) must see it running.
    let d = Daemon::start_with_env(
        &[ID[0], ID[1], "--model", "sim:qwen2.5-vl-3b?time_scale=0.3"],
        &[("RKLLMD_LOG", "debug")],
    );
    assert_eq!(d.metric("rkllmd_image_encoder_running").await, Some(0.0));
    let (client, url) = (d.client(), d.url.clone());
    let mut body = with_images(&[data_url(&png(5, 5, [0, 0, 255]))]);
    body["stream"] = json!(true);
    let leaving =
        tokio::spawn(async move { client.post(format!("{url}/v1/chat/completions")).json(&body).send().await });
    assert!(d.wait_metric("rkllmd_image_encoder_running", |n| n == 1.0).await, "the encoder never ran");
    leaving.abort();
    let _ = leaving.await;
    let (status, reply) = chat(&d, json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})).await;
    assert_eq!(status, 200, "{reply}");
    // The order of the two, in the DEBUG log read after the exit.
    let (_, log) = d.exit();
    let returned = log.lines().position(|l| l.contains("vision encoder returned")).expect("the encoder returned");
    let next = log
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("run submitted") && l.contains("images=false"))
        .map(|(i, _)| i)
        .next();
    assert!(next.is_some_and(|n| n > returned), "the next run started while the encoder ran:\n{log}");
}

/// `--vision-tags` sets the single model's tags over the family table,
/// as `vision_tags` does in a `[[models]]` table (ABI 1.2 takes them at init).
#[tokio::test]
async fn the_cli_sets_the_image_tags() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let spec = format!("{VL}&record={}", record.display());
    let tags = ["<|vision_start|>", "<|vision_end|>", "<|video_pad|>"];
    let d = Daemon::start(
        &[&[ID[0], ID[1], "--model", &spec, "--runtime-abi", "1.2", "--vision-tags"][..], &tags].concat(),
    );
    let init = common::sim_records(&record, "init");
    let init = init.last().expect("an init call");
    assert_eq!(
        [&init["img_start"], &init["img_end"], &init["img_content"]],
        tags.map(|t| json!(t)).each_ref(),
        "{init}"
    );
    drop(d);
}

#[tokio::test]
async fn a_models_directory_pairs_each_model_with_its_encoder() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["qwen2-vl-2b.rkllm", "qwen2-vl-2b_vision_rk3588.rknn", "plain.rkllm"] {
        std::fs::write(dir.path().join(file), "x").unwrap();
    }
    let dir_arg = dir.path().to_str().unwrap();
    let d = Daemon::start_with_env(
        &["--backend", "sim", "--models-dir", dir_arg, "--template", "chatml"],
        &[("RKLLM_SIM_TIME_SCALE", "0")],
    );
    let show = |model: &'static str| {
        let d = &d;
        async move {
            let r = d.post("/api/show", json!({"model": model})).await;
            r.json::<Value>().await.unwrap()["capabilities"].clone()
        }
    };
    // From the template (chatml: tools, no thinking), and vision from the encoder.
    assert_eq!(show("qwen2-vl-2b").await, json!(["completion", "embedding", "tools", "vision"]));
    assert_eq!(show("plain").await, json!(["completion", "embedding", "tools"]));
    let mut body = with_images(&[data_url(&png(3, 3, [1, 2, 3]))]);
    body["model"] = json!("qwen2-vl-2b");
    let (status, reply) = chat(&d, body.clone()).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #010203 (392x392).");
    body["model"] = json!("plain");
    let (status, reply) = chat(&d, body).await;
    assert_eq!((status, reply["error"]["code"].as_str()), (400, Some("images_not_supported")), "{reply}");
}

#[tokio::test]
async fn an_encoder_failure_is_reported_and_the_daemon_keeps_serving() {
    let d = Daemon::start_with_env(&[ID[0], ID[1], "--model", VL], &[("RKNN_SIM_FAIL", "run")]);
    // The LLM never ran: 503 runtime_unavailable, which a proxy may retry on another board.
    let (status, reply) = chat(&d, with_images(&[data_url(&png(3, 3, [1, 2, 3]))])).await;
    assert_eq!((status, reply["error"]["code"].as_str()), (503, Some("runtime_unavailable")), "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("vision encoder failed"), "{reply}");
    let (status, reply) = chat(&d, json!({"model": "m", "messages": [{"role": "user", "content": "text only"}]})).await;
    assert_eq!(status, 200, "{reply}");
}

#[tokio::test]
async fn a_run_with_images_does_not_start_on_a_kept_conversation() {
    // The in-process simulator brings a tokenizer: the conversation cache is on,
    // and a text turn leaves its conversation in the KV cache.
    let d = Daemon::start(&[
        ID[0],
        ID[1],
        "--model",
        "sim:qwen2.5-vl-3b?time_scale=0&reply_tokens=4",
        "--max-context-len",
        "600",
        "--max-new-tokens",
        "50",
    ]);
    let long = "the ".repeat(400);
    let (status, reply) = chat(&d, json!({"model": "m", "messages": [{"role": "user", "content": long}]})).await;
    assert_eq!(status, 200, "{reply}");
    let kept = reply["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(kept > 380, "the text turn fills {kept} of 600 positions");
    // 400-odd kept positions and this run's 200-odd would not fit together.
    let (status, reply) = chat(&d, with_images(&[data_url(&png(3, 3, [9, 9, 9]))])).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #090909 (392x392).");
}

/// A local http server of its own (port 0): `/red.png` an 8×8 red PNG,
/// `/big.png` more bytes than the daemon takes, `/moved` a redirect.
async fn image_server() -> String {
    use axum::{http::header, response::IntoResponse, routing::get, Router};
    let red = png(8, 8, [255, 0, 0]);
    let app = Router::new()
        .route("/red.png", get(move || async move { ([(header::CONTENT_TYPE, "image/png")], red.clone()) }))
        .route("/big.png", get(|| async { vec![0u8; 200_000] }))
        .route("/moved", get(|| async { axum::response::Redirect::temporary("/red.png").into_response() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn http_image_urls_are_fetched_only_from_hosts_the_operator_lists() {
    let server = image_server().await;
    let red = format!("{server}/red.png");
    let base = [ID[0], ID[1], "--model", VL, "--max-image-bytes", "100000"];
    let listed = Daemon::start(&[&base[..], &["--image-url-hosts", "127.0.0.1"]].concat());
    let (status, reply) = chat(&listed, with_images(std::slice::from_ref(&red))).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #ff0000 (392x392).", "as the same image sent inline");
    let refusals = [
        (format!("{server}/big.png"), "image_too_large"),
        (format!("{server}/moved"), "invalid_image"),
        (format!("{server}/missing.png"), "invalid_image"),
        // https is fetched too: here the TLS handshake with a plain http server fails.
        (red.replacen("http://", "https://", 1), "invalid_image"),
        ("http://localhost.invalid/red.png".to_owned(), "image_url_not_allowed"),
    ];
    for (url, code) in refusals {
        let (status, reply) = chat(&listed, with_images(std::slice::from_ref(&url))).await;
        assert_eq!((status, &reply["error"]["code"]), (400, &json!(code)), "{url}: {reply}");
        assert_eq!(reply["error"]["param"], "messages[0].content[0].image_url");
    }
    // `*`: public hosts only, and this one is loopback. Unset: no URL at all.
    let public = Daemon::start(&[&base[..], &["--image-url-hosts", "*"]].concat());
    let (status, reply) = chat(&public, with_images(std::slice::from_ref(&red))).await;
    assert_eq!((status, &reply["error"]["code"]), (400, &json!("image_url_not_allowed")), "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("not a public address"), "{reply}");
    // IPv6 literals that carry a private IPv4 address: refused before any connection is made.
    for host in [
        "[64:ff9b::a9fe:a9fe]",
        "[64:ff9b:1::a9fe:a9fe]",
        "[2002:a9fe:a9fe::]",
        "[::127.0.0.1]",
        "[::ffff:169.254.169.254]",
        "[2001:0:a9fe:a9fe::f7f7:f7f7]",
        "[2001:0:808:808::f5ff:fffe]",
    ] {
        let url = format!("http://{host}/latest/meta-data");
        let (status, reply) = chat(&public, with_images(std::slice::from_ref(&url))).await;
        assert_eq!((status, &reply["error"]["code"]), (400, &json!("image_url_not_allowed")), "{url}: {reply}");
    }
    let off = Daemon::start(&base);
    let (status, reply) = chat(&off, with_images(&[red])).await;
    assert_eq!((status, &reply["error"]["code"]), (400, &json!("invalid_image")), "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("image_url_hosts"), "{reply}");
}

/// A TLS server of Debian's `openssl s_server`, serving `dir`'s files,
/// with a certificate from a CA of its own (`dir/ca.pem`); its port.
fn tls_image_server(dir: &std::path::Path) -> (std::process::Child, u16) {
    use std::process::{Command, Stdio};
    provision::require(&[provision::OPENSSL]);
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl (Debian's openssl)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[&["req", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test CA"]]
            .concat(),
    );
    openssl(&[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1"]].concat());
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = Command::new("openssl")
        .current_dir(dir)
        .args([
            "s_server",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            "leaf.pem",
            "-key",
            "leaf.key",
            "-WWW",
            "-quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Serving once it accepts a connection (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "openssl s_server did not start");
        std::thread::yield_now();
    }
    (server, port)
}

#[tokio::test]
async fn https_image_urls_are_fetched_with_the_certificate_checked_against_the_systems_store() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("red.png"), png(8, 8, [255, 0, 0])).unwrap();
    let (mut server, port) = tls_image_server(dir.path());
    let url = format!("https://127.0.0.1:{port}/red.png");
    let args = [ID[0], ID[1], "--model", VL, "--image-url-hosts", "127.0.0.1"];
    // The system's store does not know the test's CA: refused, and the message says why.
    let untrusted = Daemon::start(&args);
    let (status, reply) = chat(&untrusted, with_images(std::slice::from_ref(&url))).await;
    assert_eq!((status, &reply["error"]["code"]), (400, &json!("invalid_image")), "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("UnknownIssuer"), "{reply}");
    // SSL_CERT_FILE names the store (as for OpenSSL): fetched, as the same image sent inline.
    let ca = dir.path().join("ca.pem");
    let trusted = Daemon::start_with_env(&args, &[("SSL_CERT_FILE", ca.to_str().unwrap())]);
    let (status, reply) = chat(&trusted, with_images(&[url])).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(content(&reply), "I see 1 image: image 1 is #ff0000 (392x392).");
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Images in the conversation cache: a follow-up that resends the image
/// prefills only its new text, and the model still sees the image; a turn
/// that adds an image runs whole, restored from the previous turn's file
/// (`engine/saved.rs`). The replies are those of the same conversation without the cache.
#[tokio::test]
async fn a_follow_up_that_resends_an_image_prefills_only_its_new_text() {
    let (red, blue) = (data_url(&png(8, 8, [255, 0, 0])), data_url(&png(8, 8, [0, 0, 255])));
    let user = |url: Option<&str>, text: &str| match url {
        Some(url) => json!({"role": "user", "content": [image(url), {"type": "text", "text": text}]}),
        None => json!({"role": "user", "content": text}),
    };
    let turns = [
        (Some(red.as_str()), "What is this?"),
        (None, "And its colour?"),
        (Some(blue.as_str()), "And this?"),
        (None, "Which came first?"),
    ];
    // A turn's reply, cached tokens, cache use, miss reason, and (encoder runs, embedding cache hits).
    type Turn = (String, u64, Option<String>, Option<String>, (Option<u64>, Option<u64>));
    let mut runs: Vec<Vec<Turn>> = Vec::new();
    // The conversation cache on and off with the embedding cache, then on
    // without it (`--vision-cache-entries 0`): the encoder runs only for the
    // turns that send images, each of their images encoded again.
    for (cache, embeddings, encoder_runs) in [("on", "32", 2.0), ("off", "32", 2.0), ("on", "0", 3.0)] {
        // Prefills that take time: without any, turn 3's load of turn 2's
        // file, slowed by a busy machine, can measure costlier than prefilling.
        let d = Daemon::start(&[
            ID[0],
            ID[1],
            "--model",
            "sim:qwen2.5-vl-3b?time_scale=0.02",
            "--conversation-cache",
            cache,
            "--vision-cache-entries",
            embeddings,
        ]);
        let mut messages: Vec<Value> = Vec::new();
        let mut seen = Vec::new();
        for (url, text) in turns {
            messages.push(user(url, text));
            let (status, reply) = chat(&d, json!({"model": "m", "messages": messages})).await;
            assert_eq!(status, 200, "{reply}");
            let t = &reply["timings"];
            seen.push((
                content(&reply).to_owned(),
                reply["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap(),
                t["cache"].as_str().map(str::to_owned),
                t["cache_miss"].as_str().map(str::to_owned),
                (t["images"]["encoder_runs"].as_u64(), t["images"]["cache_hits"].as_u64()),
            ));
            messages.push(json!({"role": "assistant", "content": content(&reply)}));
        }
        let metrics = d.client().get(format!("{}/metrics", d.url)).send().await.unwrap().text().await.unwrap();
        let what = format!("conversation cache {cache}, {embeddings} embeddings kept: {seen:?}");
        assert_eq!(metric(&metrics, "rkllmd_image_encoder_runs_total"), encoder_runs, "{what}");
        runs.push(seen);
    }
    let (on, off, on_unkept) = (&runs[0], &runs[1], &runs[2]);
    let replies = |run: &[Turn]| run.iter().map(|t| t.0.clone()).collect::<Vec<_>>();
    assert_eq!(replies(on), replies(off), "the cache changes no reply");
    assert_eq!(replies(on_unkept), replies(on), "nor does the embedding cache");
    // A follow-up whose image the KV cache holds neither runs the encoder nor
    // counts a hit for an embedding it does not send.
    for t in [1, 3] {
        assert_eq!(on_unkept[t].4, (Some(0), Some(0)), "turn {}: {:?}", t + 1, on_unkept[t]);
        assert_eq!(on[t].4, (Some(0), Some(0)), "turn {}: {:?}", t + 1, on[t]);
    }
    assert_eq!(on_unkept[2].4, (Some(2), Some(0)), "turn 3 sends both images: {:?}", on_unkept[2]);
    assert_eq!(on[1].0, "I see 1 image: image 1 is #ff0000 (392x392).", "the cached image is still seen");
    assert_eq!(on[3].0, "I see 2 images: image 1 is #ff0000 (392x392), image 2 is #0000ff (392x392).");
    // Turn 2 and 4 reuse everything before their new text (the image's 198 positions among it).
    for t in [1, 3] {
        assert_eq!(on[t].2.as_deref(), Some("resident"), "turn {}: {:?}", t + 1, on[t]);
        assert!(on[t].1 > 198, "turn {}: {:?}", t + 1, on[t]);
    }
    // A turn that adds an image runs whole, sending both images (the first
    // one's embedding kept), and the runtime spares it the file turn 2 saved.
    assert_eq!((on[2].2.as_deref(), on[2].4), (Some("restored"), (Some(1), Some(1))), "{:?}", on[2]);
    assert!(on[2].1 > on[1].1, "turn 2's whole prompt is restored: {:?}", on[2]);
    assert!(off.iter().all(|t| t.1 == 0), "{off:?}");
}

/// Large PNGs are decoded row by row and shrunk as they go (src/vision/png_rows.rs),
/// within the daemon's decoding budget: several at once are each answered, with
/// their colour. (Their memory is measured in docs/reliability.md, "Images".)
#[tokio::test]
async fn large_pngs_at_once_are_each_answered() {
    let d = Daemon::start(&[ID[0], ID[1], "--model", VL, "--max-image-bytes", "8000000"]);
    let mut out = std::io::Cursor::new(Vec::new());
    image::RgbaImage::from_pixel(3000, 3000, image::Rgba([0, 0, 255, 255]))
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    let blue = data_url(&out.into_inner());
    let requests = (0..4).map(|_| chat(&d, with_images(std::slice::from_ref(&blue))));
    for (status, reply) in futures_util::future::join_all(requests).await {
        assert_eq!(status, 200, "{reply}");
        assert_eq!(content(&reply), "I see 1 image: image 1 is #0000ff (392x392).");
    }
}

/// Preparations run as many at once as the machine has cores
/// (`api/request/prepare.rs`); one waiting on an image URL gives its place
/// back meanwhile. More fetches than places are in flight at once here,
/// held by the server until a text request has been answered beside them.
#[tokio::test]
async fn image_urls_being_fetched_do_not_hold_text_requests_back() {
    use axum::{http::header, routing::get, Router};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::sync::{watch, Notify};
    let places = std::thread::available_parallelism().map_or(2, |n| n.get());
    let fetches = places + 1;
    let (release, released) = watch::channel(false);
    let (arrived, arrival) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let red = png(8, 8, [255, 0, 0]);
    let (count, notify) = (Arc::clone(&arrived), Arc::clone(&arrival));
    let held = get(move || {
        let (red, mut released) = (red.clone(), released.clone());
        count.fetch_add(1, Ordering::SeqCst);
        notify.notify_one();
        async move {
            released.wait_for(|go| *go).await.unwrap();
            ([(header::CONTENT_TYPE, "image/png")], red)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/held.png", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, Router::new().route("/held.png", held)).await.unwrap() });
    let args = [ID[0], ID[1], "--model", VL, "--image-url-hosts", "127.0.0.1", "--image-url-timeout-ms", "120000"];
    // Every request waits in the queue meanwhile: room for all, and the text one.
    let depth = (fetches + 1).to_string();
    let d = Arc::new(Daemon::start(&[&args[..], &["--queue-depth", &depth]].concat()));
    let images: Vec<_> = (0..fetches)
        .map(|_| {
            let (d, url) = (Arc::clone(&d), url.clone());
            tokio::spawn(async move { chat(&d, with_images(&[url])).await })
        })
        .collect();
    let all_in_flight = async {
        while arrived.load(Ordering::SeqCst) < fetches {
            arrival.notified().await;
        }
    };
    let waited = tokio::time::timeout(std::time::Duration::from_secs(60), all_in_flight).await;
    let seen = arrived.load(Ordering::SeqCst);
    assert!(waited.is_ok(), "{seen} of {fetches} fetches reached the server: the others wait for a place ({places})");
    let (status, reply) = chat(&d, json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(status, 200, "a text request beside {fetches} held fetches: {reply}");
    assert_eq!(arrived.load(Ordering::SeqCst), fetches, "no fetch was retried");
    release.send(true).unwrap();
    for image in images {
        let (status, reply) = image.await.unwrap();
        assert_eq!(status, 200, "{reply}");
        assert_eq!(content(&reply), "I see 1 image: image 1 is #ff0000 (392x392).");
    }
}
