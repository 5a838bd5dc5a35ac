//! Request timelines and the figures derived from them.

pub mod timeline;

pub use timeline::{RuntimePerf, Timeline, Timings};
