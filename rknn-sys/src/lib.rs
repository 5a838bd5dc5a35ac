//! Rockchip's RKNN runtime (`librknnrt.so`) for vision encoders: the C
//! types of `rknn_api.h` that a vision-language model's image encoder needs
//! ([`types`]), loading the library at run time with every symbol checked
//! ([`loader`]), and [`Encoder`], one context on its own thread.
//!
//! Like `rkllm-sys`, the daemon calls the runtime only through a
//! [`Functions`] table of C function pointers, filled by `dlsym` or, in
//! process, with the simulated encoder's functions (`rknn-sim`), so the
//! simulator exercises the FFI code that runs on a board.

pub mod encoder;
pub mod loader;
pub mod types;

pub use encoder::{Encoder, EncoderError, EncoderInfo};
pub use loader::{find_library, Functions, LoadError, Origin, Runtime, LIBRARY_NAME, SYMBOLS};
