//! rkllmd as a library: the daemon's layers, so that `main.rs` only parses
//! the command line and tests can drive the HTTP router in-process.
//!
//! Layers, top to bottom (an import only ever points down):
//! `app` (the composition root: every layer built from its own settings) →
//! `api` (HTTP) → `registry` (the models, loaded on demand) →
//! `conversation` (prompts, reply text), `engine` (the runtime thread, the
//! queue, the shared NPU turn), `metrics` (timeline, figures) → `sampling` →
//! `rkllm-sys`.
//! `config` is read by `main`, the commands it runs and the root alone
//! (docs/architecture.md lists who and why).

pub mod api;
pub mod app;
pub mod bench;
pub mod config;
pub mod conn_cap;
pub mod conversation;
pub mod doctor;
pub mod embed;
pub mod engine;
pub mod error_text;
pub mod heap;
pub mod keep_alive;
pub mod listener;
pub mod log_sink;
pub mod metrics;
pub mod notify;
pub mod pull;
pub mod registry;
pub mod sampling;
pub mod server;
pub mod tokenizer;
pub mod vision;
