//! `--lib` names one file, which is both the one whose version is checked
//! and the one loaded: a bare name is the file in the working directory,
//! never another one `dlopen` would find on the library path.

mod common;
use common::*;

#[tokio::test]
async fn a_bare_lib_name_loads_the_checked_file_not_one_on_the_library_path() {
    let cwd = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let name = "librkllmrt.so";
    std::fs::copy(sim_cdylib(), cwd.path().join(name)).unwrap();
    // What `dlopen("librkllmrt.so")` would find first: not a library at all.
    std::fs::write(elsewhere.path().join(name), b"not the checked runtime").unwrap();
    let ld_path = elsewhere.path().to_str().unwrap();
    let d = Daemon::start_in(
        Some(cwd.path()),
        &["--backend", "rkllm", "--lib", name, "--model", "sim:instant", "--model-id", "m"],
        &[("LD_LIBRARY_PATH", ld_path)],
    );
    let (_, h) = d.get_json("/health").await;
    let loaded = cwd.path().canonicalize().unwrap().join(name);
    assert_eq!(h["runtime"]["origin"], loaded.to_str().unwrap(), "{h}");
    assert_eq!(d.post("/v1/chat/completions", chat("m", "hi")).await.status().as_u16(), 200);
}
