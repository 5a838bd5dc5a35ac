//! The cdylib as a drop-in `librkllmrt.so`: found, sniffed and loaded the
//! way the daemon loads the vendor library, then paced like its profile.

mod common;

use common::{collect, first_turn_tokens, median};
use rkllm_sys::{sniff_file, Abi, InitConfig, Model, RunRequest, Runtime};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Cargo puts the cdylib into `target/<profile>/deps/` (next to this test
/// executable) and a copy into `target/<profile>/`.
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("executable directory");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|dir| dir.join("librkllm_sim.so"))
        .find(|p| p.is_file())
        .expect("librkllm_sim.so is built next to the tests")
}

#[test]
fn loads_as_runtime_1_3_and_paces_like_its_profile() {
    let path = cdylib();
    let sniffed = sniff_file(&path, None).expect("version marker found");
    assert_eq!(sniffed.version.as_deref(), Some("1.3.0"));
    assert_eq!(sniffed.abi, Abi::V1_3);

    let runtime = Arc::new(Runtime::load(&path, None).expect("dlopen and every symbol"));
    assert_eq!(runtime.abi(), Abi::V1_3);
    let scale = 0.2;
    let model = Model::load(runtime, InitConfig::new(format!("sim:qwen2.5-1.5b?time_scale={scale}&reply_tokens=12")))
        .expect("init");
    assert!(model.init_log().contains("rkllm-runtime version: 1.3.0 (simulated)"), "{}", model.init_log());
    assert!(model.init_log().contains("max_context_limit: 4096"), "{}", model.init_log());

    let prompt = "Tell me about the NPU in the RK3588, please.";
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    model.submit(RunRequest::prompt(prompt), tx).expect("submitted");
    let out = collect(&mut rx);

    assert_eq!(out.finish.code, 0);
    assert!(!out.finish.is_error());
    assert_eq!(out.tokens.len(), 12);
    let perf = out.perf();
    assert_eq!(perf.generate_tokens as usize, out.tokens.len());
    let prefill_tokens = first_turn_tokens(prompt);
    assert_eq!(perf.prefill_tokens as usize, prefill_tokens);

    let profile = rkllm_sim::profile("qwen2.5-1.5b").expect("profile");
    let prefill = Duration::from_secs_f64(profile.prefill_ms(prefill_tokens) * scale / 1000.0);
    let decode = Duration::from_secs_f64(profile.decode_ms * scale / 1000.0);
    // The prefill is slept in full: never shorter, seen from either side.
    assert!(
        out.tokens[0].at - out.started >= prefill,
        "first token after {:?}, prefill {prefill:?}",
        out.tokens[0].at - out.started
    );
    assert!(perf.prefill_time_ms >= prefill.as_secs_f64() * 1000.0 - 0.01, "{perf:?} vs {prefill:?}");
    // Pacing: median gap within ±50 % of the decode interval (shared machine).
    let gap = median(out.gaps());
    assert!(gap >= decode / 2 && gap <= decode * 3 / 2, "median gap {gap:?}, decode interval {decode:?}");
    // Measured, not copied: generation spans the 11 intervals after the
    // first token (less the first token's wake-up lateness: one interval of
    // tolerance).
    assert!(perf.generate_time_ms >= (decode * 10).as_secs_f64() * 1000.0, "{perf:?}");
    assert!(perf.memory_usage_mb > 0.0, "VmHWM read: {perf:?}");
}

/// Every function of the official 1.3.0 header (docs/runtime.md, "Functions"):
/// a program built against `rkllm.h` links only if all of them resolve.
const HEADER_1_3_0: [&str; 15] = [
    "rkllm_createDefaultParam",
    "rkllm_init",
    "rkllm_load_lora",
    "rkllm_load_prompt_cache",
    "rkllm_release_prompt_cache",
    "rkllm_destroy",
    "rkllm_run",
    "rkllm_run_async",
    "rkllm_abort",
    "rkllm_is_running",
    "rkllm_clear_kv_cache",
    "rkllm_get_kv_cache_size",
    "rkllm_set_chat_template",
    "rkllm_set_function_tools",
    "rkllm_set_cross_attn_params",
];

#[test]
fn exports_every_function_of_the_1_3_0_header() {
    // SAFETY: the simulator's initialisers have no side effects.
    let lib = unsafe { libloading::Library::new(cdylib()) }.expect("dlopen");
    let missing: Vec<&str> = HEADER_1_3_0
        .iter()
        .copied()
        // SAFETY: only the address is looked up; nothing is called.
        .filter(|name| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err())
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

#[test]
fn cross_attn_params_are_accepted_only_with_use_cross_attn() {
    use rkllm_sys::common::{LLMHandle, RKLLMCrossAttnParam};
    use rkllm_sys::v1_3;
    type CreateDefault = unsafe extern "C" fn() -> v1_3::RKLLMParam;
    type Init = unsafe extern "C" fn(*mut LLMHandle, *mut v1_3::RKLLMParam, *mut v1_3::RKLLMCallback) -> i32;
    type SetCrossAttn = unsafe extern "C" fn(LLMHandle, *mut RKLLMCrossAttnParam) -> i32;
    type Destroy = unsafe extern "C" fn(LLMHandle) -> i32;
    let record = common::temp_path("record.jsonl");
    let path = std::ffi::CString::new(format!("sim:instant?record={}", record.display())).unwrap();
    // SAFETY: the symbols have these signatures (rkllm.h 1.3.0); every
    // pointer passed is valid for the call.
    unsafe {
        let lib = libloading::Library::new(cdylib()).expect("dlopen");
        let create: libloading::Symbol<CreateDefault> = lib.get(b"rkllm_createDefaultParam").unwrap();
        let init: libloading::Symbol<Init> = lib.get(b"rkllm_init").unwrap();
        let set: libloading::Symbol<SetCrossAttn> = lib.get(b"rkllm_set_cross_attn_params").unwrap();
        let destroy: libloading::Symbol<Destroy> = lib.get(b"rkllm_destroy").unwrap();
        let mut params = RKLLMCrossAttnParam {
            encoder_k_cache: std::ptr::null_mut(),
            encoder_v_cache: std::ptr::null_mut(),
            encoder_mask: std::ptr::null_mut(),
            encoder_pos: std::ptr::null_mut(),
            num_tokens: 7,
        };
        for use_cross_attn in [0, 1] {
            let mut param = create();
            param.model_path = path.as_ptr();
            param.extend_param.use_cross_attn = use_cross_attn;
            let mut handle: LLMHandle = std::ptr::null_mut();
            assert_eq!(init(&mut handle, &mut param, std::ptr::null_mut()), 0);
            let expected = if use_cross_attn == 1 { 0 } else { -1 };
            assert_eq!(set(handle, &mut params), expected, "use_cross_attn {use_cross_attn}");
            assert_eq!(set(handle, std::ptr::null_mut()), -1, "NULL params");
            assert_eq!(destroy(handle), 0);
        }
    }
    let calls: Vec<_> =
        common::calls(&record, "set_cross_attn_params").iter().map(|r| r["num_tokens"].clone()).collect();
    assert_eq!(calls, [serde_json::json!(7), serde_json::Value::Null, serde_json::json!(7), serde_json::Value::Null]);
}
