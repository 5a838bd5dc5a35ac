//! The simulated encoder through `rknn_sys::Encoder`, in process and as the
//! cdylib loaded like `librknnrt.so`.

use rknn_sys::types::RKNN_NPU_CORE_ALL;
use rknn_sys::{Encoder, EncoderError, Runtime, SYMBOLS};
use std::path::PathBuf;
use std::sync::Arc;

/// Cargo puts the cdylib next to this test executable or one directory up.
fn cdylib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("executable directory");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|dir| dir.join("librknn_sim.so"))
        .find(|p| p.is_file())
        .expect("librknn_sim.so is built next to the tests")
}

/// A 392×392 image: the top half `top`, the bottom half `bottom`.
fn halves(top: [u8; 3], bottom: [u8; 3]) -> Vec<u8> {
    (0..392).flat_map(|y| std::iter::repeat_n(if y < 196 { top } else { bottom }, 392)).flatten().collect()
}

fn exercise(runtime: Runtime) {
    let encoder = Encoder::open(Arc::new(runtime), "sim:qwen2.5-vl-3b?time_scale=0", RKNN_NPU_CORE_ALL).expect("open");
    let info = encoder.info().clone();
    assert_eq!((info.width, info.height, info.input_format), (392, 392, "NHWC"));
    assert_eq!((info.n_image_tokens, info.embed_size, info.n_outputs), (196, 256, 1));
    assert_eq!(info.api_version, "2.3.2 (simulated)");
    assert_eq!(info.driver_version, "0.9.8 (simulated)");

    let e = encoder.encode(halves([255, 0, 0], [0, 0, 255])).expect("encode");
    assert_eq!(e.len(), 196 * 256);
    assert_eq!(&e[0..3], &[0.5, 0.0, 0.5], "the image's mean colour");
    assert_eq!(&e[3..6], &[1.0, 0.0, 0.0], "token 0 sees the top band");
    assert_eq!(&e[195 * 256 + 3..195 * 256 + 6], &[0.0, 0.0, 1.0], "the last token sees the bottom band");
    assert_eq!(encoder.encode(halves([255, 0, 0], [0, 0, 255])).unwrap(), e, "deterministic");
    assert_ne!(encoder.encode(halves([0, 0, 255], [255, 0, 0])).unwrap(), e, "a function of where the pixels are");

    // From another thread: served by the encoder's own thread.
    let encoder = Arc::new(encoder);
    let other = encoder.clone();
    let from_thread = std::thread::spawn(move || other.encode(halves([9, 9, 9], [9, 9, 9]))).join().unwrap().unwrap();
    assert_eq!(&from_thread[0..3], &[9.0 / 255.0; 3]);

    assert_eq!(encoder.encode(vec![0; 10]), Err(EncoderError::InputSize { expected: 392 * 392 * 3, got: 10 }));
}

#[test]
fn in_process() {
    exercise(rknn_sim::runtime());
}

#[test]
fn through_dlopen_of_the_cdylib() {
    let path = cdylib();
    let library = unsafe { libloading::Library::new(&path) }.unwrap();
    for symbol in SYMBOLS {
        assert!(unsafe { library.get::<*const ()>(symbol.as_bytes()) }.is_ok(), "{symbol} exported");
    }
    exercise(Runtime::load(&path).expect("dlopen and every symbol"));
}

#[test]
fn a_profile_without_an_encoder_or_a_missing_file_fails_init() {
    for model in ["sim:qwen2.5-1.5b", "/nonexistent/vision.rknn"] {
        match Encoder::open(Arc::new(rknn_sim::runtime()), model, RKNN_NPU_CORE_ALL) {
            Err(EncoderError::Init { code: -6, .. }) => {}
            other => panic!("{model}: {:?}", other.map(|e| e.info().clone())),
        }
    }
}

#[test]
fn a_missing_library_or_symbol_is_named() {
    let err = Runtime::load(std::path::Path::new("/nonexistent/librknnrt.so")).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[test]
fn another_thread_is_refused_by_the_simulator() {
    // The raw table: a context used from a second thread fails loudly.
    let fns = rknn_sim::functions();
    let mut ctx = 0;
    let path = c"sim:qwen2.5-vl-3b?time_scale=0";
    assert_eq!(unsafe { (fns.init)(&mut ctx, path.as_ptr() as *mut _, 0, 0, std::ptr::null_mut()) }, 0);
    let code = std::thread::spawn(move || unsafe { (fns.run)(ctx, std::ptr::null_mut()) }).join().unwrap();
    assert_eq!(code, -7);
    assert_eq!(unsafe { (fns.destroy)(ctx) }, 0);
}
