//! The Dockerfile as far as it can be checked without building it (no
//! image registry is reachable here, so neither base image can be pulled):
//! the final stage runs as a non-root user, exposes the API's port and
//! starts the binary the build stage installs, and its HEALTHCHECK command,
//! run against a real daemon, passes only when `/health/ready` is 200.

mod common;
use common::*;
use std::process::Command;

fn dockerfile() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap()
}

/// The instructions of the last stage, continuation lines joined.
fn final_stage(text: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    let lines: Vec<&str> = joined.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).expect("a FROM");
    lines[last_from..].iter().map(|l| l.to_string()).collect()
}

fn instruction<'a>(stage: &'a [String], name: &str) -> Vec<&'a str> {
    stage.iter().filter_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).map(str::trim).collect()
}

#[test]
fn the_image_runs_the_built_binary_as_a_user_with_a_health_check() {
    let text = dockerfile();
    assert!(text.contains("/out/usr/bin/rkllmd"), "the build stage installs the binary under /out");
    let stage = final_stage(&text);
    assert_eq!(instruction(&stage, "COPY"), ["--from=build /out/ /"]);
    assert_eq!(instruction(&stage, "ENTRYPOINT"), [r#"["/usr/bin/rkllmd"]"#]);
    assert_eq!(instruction(&stage, "EXPOSE"), ["8080"]);
    let user = instruction(&stage, "USER");
    let uid = user.last().expect("a USER").split(':').next().unwrap();
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u != 0),
        "a numeric, non-root user (Kubernetes' runAsNonRoot checks it): {uid}"
    );
    let k8s =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/k8s/daemonset.yaml")).unwrap();
    assert!(k8s.contains(&format!("runAsUser: {uid}")), "the DaemonSet runs as the image's user");
}

/// The HEALTHCHECK's command (exec form), run here with `port`.
fn health_check(port: u16) -> bool {
    let stage = final_stage(&dockerfile());
    let check = instruction(&stage, "HEALTHCHECK");
    let cmd = check.first().expect("a HEALTHCHECK").split_once("CMD ").expect("CMD").1;
    let argv: Vec<String> = serde_json::from_str(cmd).expect("the exec form: a JSON array");
    Command::new(&argv[0]).args(&argv[1..]).env("RKLLMD_PORT", port.to_string()).status().unwrap().success()
}

fn port(d: &Daemon) -> u16 {
    d.url.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_health_check_passes_only_while_the_daemon_is_ready() {
    let d = Daemon::start(&["--model", "sim:qwen2.5-1.5b?reply_tokens=40", "--model-id", "m", "--queue-depth", "0"]);
    assert!(health_check(port(&d)), "ready");
    // One generation running and no queue place: /health/ready is 503.
    let running = d.post(
        "/v1/chat/completions",
        serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    );
    let (running, _) = tokio::join!(running, d.wait_generating());
    let busy = port(&d);
    assert!(!tokio::task::spawn_blocking(move || health_check(busy)).await.unwrap(), "not ready while full");
    read_sse(running).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert!(!health_check(closed), "nothing listening");
}

/// Every base image is named in full (registry, path, tag): buildah and
/// podman with Debian's default `registries.conf` refuse short names.
#[test]
fn base_images_are_fully_qualified() {
    let text = dockerfile();
    let images: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .map(|l| l.split_whitespace().find(|w| !w.starts_with("--")).unwrap())
        .collect();
    assert_eq!(images.len(), 2, "{images:?}");
    for image in images {
        let (registry, rest) = image.split_once('/').unwrap_or_default();
        assert!(registry.contains('.'), "{image}: the registry's host first");
        assert!(rest.contains('/') && rest.contains(':'), "{image}: its path and a tag");
    }
}

/// What the build stage reads from the build context exists in the
/// repository and is not left out of the context by `.dockerignore`.
#[test]
fn the_build_stages_inputs_are_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = dockerfile().replace("\\\n", " ");
    // `install … -t DIR FILES…` of the build stage: the files it takes from the context.
    let sources: Vec<&str> = text
        .split_whitespace()
        .filter(|w| w.starts_with("assets/"))
        .chain(["Cargo.toml", "Cargo.lock", "src/main.rs", "rkllm-sys/Cargo.toml", "rknn-sys/Cargo.toml"])
        .collect();
    assert!(sources.iter().any(|s| s.starts_with("assets/")), "the Swagger UI files: {sources:?}");
    for source in &sources {
        let found = match source.strip_suffix("*.gz") {
            Some(dir) => std::fs::read_dir(root.join(dir))
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "gz"))
                .count(),
            None => usize::from(root.join(source).is_file()),
        };
        assert!(found > 0, "{source} is not in the repository");
    }
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    for pattern in ignored.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let pattern = pattern.trim_end_matches('/');
        assert!(
            sources.iter().all(|s| !s.starts_with(pattern)),
            ".dockerignore's {pattern} leaves out one of {sources:?}"
        );
    }
}
