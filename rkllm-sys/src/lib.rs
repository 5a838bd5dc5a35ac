//! The C ABI of Rockchip's RKLLM runtime (`librkllmrt.so`), versions 1.3.0
//! and 1.2.1–1.2.3, loaded at run time.
//!
//! * [`v1_2`], [`v1_3`], [`common`]: `repr(C)` types, layouts asserted in `tests/layout.rs`;
//!   an ABI is its module and one line in the list below ([`abi`] says what it holds);
//! * [`sniff`]: the library's version read from its file before loading;
//! * [`loader`]: finding and `dlopen`ing the library into a function [`abi::Table`];
//! * [`model`]: the safe layer — one handle on one thread, runs as event streams;
//!   [`Activity`] and [`Model::ping`] let a watchdog tell a busy runtime from a hung one;
//!   `batch.rs`: batched runs (`n_batch` > 1), each slot to its own channel;
//!   `adapters.rs`: LoRA adapters and prompt-cache files.

pub mod abi;
mod activity;
mod adapters;
mod batch;
mod callback;
mod capture;
pub mod common;
mod error;
mod event;
pub mod loader;
mod marshal;
pub mod model;
mod output;
mod params;
pub mod sniff;
pub mod utf8;

// Every supported ABI, oldest first: its module (`v1_N.rs`: the structs and
// what differs) and its marker type. Sniffing, loading, the safe layer and the
// simulator all go by this list.
abi::runtime_abis! {
    v1_2::V1_2,
    v1_3::V1_3,
}

pub use abi::{AbiInfo, AbiTypes, ForAbi, Functions, Listed, WithFunctions};
pub use capture::capture_output;
pub use loader::{find_library, LoadError, Origin, Runtime};
pub use marshal::{ImagesArgs, InferArgs, InputData, InputFields, Marshal, ParamFields};
pub use model::{
    Activity, BatchEnd, BatchInput, BatchRequest, Event, Finish, InitConfig, LoraAdapter, Model, ModelError, Perf,
    Role, RunControl, RunInput, RunRequest, SamplingParams, Token,
};
pub use output::{CaptureError, Matrix};
pub use params::{Capture, ImageTags, Images, Rows, IMAGE_MARKER};
pub use sniff::{sniff_file, SniffError, Sniffed};
