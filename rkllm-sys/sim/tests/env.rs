//! `RKLLM_SIM_*` environment variables. One test in its own binary, since
//! it changes the process environment.

mod common;

use common::{load, prompt, temp_path};
use rkllm_sys::{Abi, InitConfig, Model, ModelError};

#[test]
fn environment_configures_a_model_file_and_the_path_wins() {
    std::env::set_var("RKLLM_SIM_PROFILE", "instant");
    std::env::set_var("RKLLM_SIM_REPLY_TOKENS", "4");
    let file = temp_path("model.rkllm");
    std::fs::write(&file, b"not really a model").unwrap();

    // A model file that exists: the profile and keys come from the environment.
    let model = load(Abi::V1_3, file.to_str().unwrap());
    assert_eq!(prompt(&model, "hi").tokens.len(), 4);
    // A key in the path wins over its variable.
    let model = load(Abi::V1_3, "sim:?reply_tokens=6");
    assert_eq!(prompt(&model, "hi").tokens.len(), 6);

    std::env::set_var("RKLLM_SIM_FAIL_INIT", "platform");
    match Model::load(common::sim(Abi::V1_3), InitConfig::new(file.to_str().unwrap())) {
        Err(ModelError::Init { log, .. }) => assert!(log.contains("Platform error: must be either RK3588"), "{log}"),
        other => panic!("expected an init failure, got {:?}", other.err()),
    }
    // An empty variable counts as unset.
    std::env::set_var("RKLLM_SIM_FAIL_INIT", "");
    assert_eq!(prompt(&load(Abi::V1_3, "sim:"), "hi").tokens.len(), 4);
}
